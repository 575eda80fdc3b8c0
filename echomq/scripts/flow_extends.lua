-- EMQ flow_extends (both wires). KEYS: flow:active, base. ARGV: lease_ms, id1, token1, ... idk, tokenk.
-- EXTENDS for flow leases: each pair whose token matches a row active in flow:active gets the new
-- deadline and the server's run_id; one reply per pair, the deadline or 0.
local now = flow_now()
local deadline = now + tonumber(ARGV[1])
local epoch
local replies = {}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local row = KEYS[2] .. 'job:' .. id
  local held = redis.call('HMGET', row, 'attempts', 'state')
  if held[1] == ARGV[i + 1] and held[2] == 'active' and redis.call('ZSCORE', KEYS[1], id) then
    epoch = epoch or flow_epoch()
    redis.call('ZADD', KEYS[1], deadline, id)
    redis.call('HSET', row, 'lease_epoch', epoch)
    replies[#replies + 1] = deadline
  else
    replies[#replies + 1] = 0
  end
end
return replies
