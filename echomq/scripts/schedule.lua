-- EMQ schedule (wire 4). KEYS: schedule, base. ARGV: id, payload, delay_ms, priority.
-- As enqueue, but the job waits in schedule until now + delay_ms (server clock).
-- A due time earlier than the schedule's head writes the wake marker: a blocked worker recomputes its timeout.
local row = KEYS[2] .. 'job:' .. ARGV[1]
if redis.call('EXISTS', row) == 1 then return 0 end
-- the queue's event switch (docs/spec.md §12): an integer bound (MAXLEN), off when absent or <= 0
local bound = redis.call('HGET', KEYS[2] .. 'meta', 'events')
if bound then
  if not string.match(bound, '^%-?%d+$') then return redis.error_reply('EMQ hash value is not an integer') end
  bound = tonumber(bound)
  if bound <= 0 then bound = nil end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(ARGV[4]) > 0 then
  redis.call('HSET', row, 'state', 'scheduled', 'payload', ARGV[2], 'attempts', '0', 'created', now, 'priority', ARGV[4])
else
  redis.call('HSET', row, 'state', 'scheduled', 'payload', ARGV[2], 'attempts', '0', 'created', now)
end
local due = now + tonumber(ARGV[3])
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
redis.call('ZADD', KEYS[1], due, ARGV[1])
if bound then
  redis.call('XADD', KEYS[2] .. 'events', 'MAXLEN', bound, '*', 'type', 'enqueued', 'id', ARGV[1], 'attempt', '0',
    'state', 'scheduled')
end
if head[2] == nil or due < tonumber(head[2]) then redis.call('ZADD', KEYS[2] .. 'wake', 0, 'w') end
return 1
