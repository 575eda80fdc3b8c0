-- EMQ extends (wire 4). KEYS: active, base. ARGV: lease_ms, id1, token1, ... idk, tokenk.
-- Each pair as extend; one reply per pair, 0 for a lost lease or a row not active in active.
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local replies = {}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local held = redis.call('HMGET', KEYS[2] .. 'job:' .. id, 'attempts', 'state')
  if held[1] == ARGV[i + 1] and held[2] == 'active' and redis.call('ZSCORE', KEYS[1], id) then
    redis.call('ZADD', KEYS[1], deadline, id)
    replies[#replies + 1] = deadline
  else
    replies[#replies + 1] = 0
  end
end
return replies
