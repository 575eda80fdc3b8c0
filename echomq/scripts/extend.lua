-- EMQ extend (wire 4). KEYS: active, base. ARGV: id, token, lease_ms.
-- The token is compared as bytes with attempts; a match re-scores the lease, whatever the state.
local row = KEYS[2] .. 'job:' .. ARGV[1]
if redis.call('HGET', row, 'attempts') ~= ARGV[2] then return 0 end
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], deadline, ARGV[1])
return deadline
