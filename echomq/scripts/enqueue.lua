-- EMQ enqueue (wire 4). KEYS: pending, base. ARGV: id, payload, priority.
-- Idempotent: an id that already has a row is not enqueued twice.
-- A new job writes the wake marker (one member) for workers blocked on it.
local row = KEYS[2] .. 'job:' .. ARGV[1]
if redis.call('EXISTS', row) == 1 then return 0 end
local priority = tonumber(ARGV[3])
local t = redis.call('TIME')
local created = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if priority > 0 then
  redis.call('HSET', row, 'state', 'pending', 'payload', ARGV[2], 'attempts', '0', 'created', created, 'priority', ARGV[3])
else
  redis.call('HSET', row, 'state', 'pending', 'payload', ARGV[2], 'attempts', '0', 'created', created)
end
redis.call('ZADD', KEYS[1], priority, ARGV[1])
-- the wake marker (SPEC §9.3): a worker blocked in BZPOPMIN on it claims now
redis.call('ZADD', KEYS[2] .. 'wake', 0, 'w')
return 1
