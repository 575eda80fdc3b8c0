-- EMQ delay (wire 4). KEYS: active, schedule, base. ARGV: id, token, delay_ms.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/due.lua.
-- The holder puts its job back to wait until now + delay_ms. A matching token on a row that
-- is not active, or not in active, is refused (SPEC §9.1). The `delayed` event when on.
-- A due time earlier than the schedule's head writes the wake marker: a blocked worker recomputes its timeout.
local row = KEYS[3] .. 'job:' .. ARGV[1]
local held, answer = fence(row, ARGV[1], ARGV[2], KEYS[1], 'active')
if not held then return answer end
local bound, refused = event_switch(KEYS[3])
if refused then return refused end
local due = now_ms() + tonumber(ARGV[3])
redis.call('ZREM', KEYS[1], ARGV[1])
local first = schedule_due(KEYS[2], ARGV[1], due)
redis.call('HSET', row, 'state', 'scheduled')
add_event(KEYS[3], bound, 'delayed', ARGV[1], ARGV[2], 'state', 'scheduled')
if first then wake(KEYS[3]) end
return due
