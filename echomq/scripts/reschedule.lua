-- EMQ reschedule (wire 4). KEYS: schedule, base. ARGV: id, delay_ms.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/due.lua.
-- A scheduled job's due time moves to now + delay_ms. No row answers 0; a row that is not
-- scheduled, or not in schedule, is refused (SPEC §9.1). The `rescheduled` event when on.
-- A due time earlier than the schedule's head writes the wake marker: a blocked worker recomputes its timeout.
local row = KEYS[2] .. 'job:' .. ARGV[1]
if redis.call('EXISTS', row) == 0 then return 0 end
local seen = redis.call('HMGET', row, 'attempts', 'state')
local refused = state_refused(seen[2], 'scheduled')
  or set_refused(KEYS[1], 'schedule', ARGV[1])
if refused then return refused end
local bound, refused = event_switch(KEYS[2])
if refused then return refused end
local due = now_ms() + tonumber(ARGV[2])
local first = schedule_due(KEYS[1], ARGV[1], due)
add_event(KEYS[2], bound, 'rescheduled', ARGV[1], seen[1] or '0', 'state', 'scheduled')
if first then wake(KEYS[2]) end
return due
