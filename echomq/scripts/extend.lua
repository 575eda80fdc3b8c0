-- EMQ extend (wire 4). KEYS: active, base. ARGV: id, token, lease_ms.
-- Loaded after lib/clock.lua, lib/held.lua.
-- The token is compared as bytes with attempts; a match on an active row in active
-- re-scores the lease. A matching token on a row that is not active is refused (SPEC §9.1).
local row = KEYS[2] .. 'job:' .. ARGV[1]
local held, answer = fence(row, ARGV[1], ARGV[2], KEYS[1], 'active')
if not held then return answer end
local deadline = now_ms() + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], deadline, ARGV[1])
return deadline
