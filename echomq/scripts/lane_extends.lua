-- EMQ lane_extends (both wires). KEYS: lanes:active, base. ARGV: lease_ms, stamp, id1, token1, ... idk, tokenk.
-- EXTENDS for lane leases: one reply per pair, the new deadline, or 0 for a lease that is lost
-- (token, state or membership). stamp 1 (wire 6) writes the server's run_id as lease_epoch.
lanes(KEYS[2])
local deadline = now_ms() + tonumber(ARGV[1])
local epoch = ARGV[2] == '1' and run_id()
local replies = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local row = base .. 'job:' .. id
  local f = redis.call('HMGET', row, 'attempts', 'state')
  if f[1] == ARGV[i + 1] and f[2] == 'active' and redis.call('ZSCORE', KEYS[1], id) then
    redis.call('ZADD', KEYS[1], deadline, id)
    if epoch then redis.call('HSET', row, 'lease_epoch', epoch) end
    replies[#replies + 1] = deadline
  else
    replies[#replies + 1] = 0
  end
end
return replies
