-- EMQ enqueue (wire 4). KEYS: pending, base. ARGV: id, payload, priority.
-- Idempotent: an id that already has a row is not enqueued twice. The `enqueued` event when on.
-- A new job writes the wake marker (one member) for workers blocked on it.
local row = KEYS[2] .. 'job:' .. ARGV[1]
local meta = KEYS[2] .. 'meta'
-- one read for both: the row counts twice, meta once; no meta, no switch to read
local seen = redis.call('EXISTS', row, row, meta)
if seen >= 2 then return 0 end
local bound, refused = event_bound(seen == 1 and redis.call('HGET', meta, 'events'))
if refused then return refused end
local priority = tonumber(ARGV[3])
local t = redis.call('TIME')
local created = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if priority > 0 then
  redis.call('HSET', row, 'state', 'pending', 'payload', ARGV[2], 'attempts', '0', 'created', created, 'priority', ARGV[3])
else
  redis.call('HSET', row, 'state', 'pending', 'payload', ARGV[2], 'attempts', '0', 'created', created)
end
redis.call('ZADD', KEYS[1], priority, ARGV[1])
add_event(KEYS[2], bound, 'enqueued', ARGV[1], '0', 'state', 'pending')
-- the wake marker (SPEC §9.3), the last write: a worker blocked in BZPOPMIN on it claims now
redis.call('ZADD', KEYS[2] .. 'wake', 0, 'w')
return 1
