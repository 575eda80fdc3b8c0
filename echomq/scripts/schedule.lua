-- EMQ schedule (wire 4). KEYS: schedule, base. ARGV: id, payload, delay_ms, priority.
-- Loaded after lib/clock.lua, lib/events.lua, lib/due.lua.
-- As enqueue, but the job waits in schedule until now + delay_ms (server clock).
-- A due time earlier than the schedule's head writes the wake marker: a blocked worker recomputes its timeout.
local row = KEYS[2] .. 'job:' .. ARGV[1]
if redis.call('EXISTS', row) == 1 then return 0 end
local bound, refused = event_switch(KEYS[2])
if refused then return refused end
local now = now_ms()
if tonumber(ARGV[4]) > 0 then
  redis.call('HSET', row, 'state', 'scheduled', 'payload', ARGV[2], 'attempts', '0', 'created', now, 'priority', ARGV[4])
else
  redis.call('HSET', row, 'state', 'scheduled', 'payload', ARGV[2], 'attempts', '0', 'created', now)
end
local due = now + tonumber(ARGV[3])
local first = schedule_due(KEYS[1], ARGV[1], due)
add_event(KEYS[2], bound, 'enqueued', ARGV[1], '0', 'state', 'scheduled')
if first then wake(KEYS[2]) end
return 1
