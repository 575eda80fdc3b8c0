-- EMQ extend (wire 4). KEYS: active, base. ARGV: id, token, lease_ms.
-- The token is compared as bytes with attempts; a match on an active row in active
-- re-scores the lease. A matching token on a row that is not active is refused (SPEC §9.1).
local row = KEYS[2] .. 'job:' .. ARGV[1]
local held, answer = fence('EMQ.EXTEND', row, ARGV[1], ARGV[2], KEYS[1], 'active')
if not held then return answer end
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], deadline, ARGV[1])
return deadline
