-- EMQ enqueue (wire 4). KEYS: pending, base. ARGV: id, payload, priority.
-- Loaded after lib/clock.lua, lib/events.lua.
-- Idempotent: an id that already has a row is not enqueued twice. The `enqueued` event when on.
-- A new job writes the wake marker (one member) for workers blocked on it, unless it is there
-- already (no worker has taken it since: writing it again would change nothing).
local row = KEYS[2] .. 'job:' .. ARGV[1]
local meta, marker = KEYS[2] .. 'meta', KEYS[2] .. 'wake'
-- one read for three: the row counts four, meta two, the marker one; no meta, no switch to read
local seen = redis.call('EXISTS', row, row, row, row, meta, meta, marker)
if seen >= 4 then return 0 end
local bound, refused = event_bound(seen >= 2 and redis.call('HGET', meta, 'events'))
if refused then return refused end
local priority = tonumber(ARGV[3])
local created = now_ms()
if priority > 0 then
  redis.call('HSET', row, 'state', 'pending', 'payload', ARGV[2], 'attempts', '0', 'created', created, 'priority', ARGV[3])
else
  redis.call('HSET', row, 'state', 'pending', 'payload', ARGV[2], 'attempts', '0', 'created', created)
end
redis.call('ZADD', KEYS[1], priority, ARGV[1])
add_event(KEYS[2], bound, 'enqueued', ARGV[1], '0', 'state', 'pending')
-- the wake marker (SPEC §9.3), the last write: a worker blocked in BZPOPMIN on it claims now
if seen % 2 == 0 then wake(KEYS[2]) end
return 1
