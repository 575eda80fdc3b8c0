-- EMQ promote (wire 4). KEYS: schedule, pending, base. ARGV: limit.
-- Moves up to limit due jobs (score <= now, lowest first) to pending at their priority.
-- A ghost gets a partial row (state only): the script trusts the keyspace. When events are on,
-- each moved job's `promoted` event, in selection order.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
-- the queue's event switch (docs/spec.md §12), read when something is due: an integer bound
-- (MAXLEN), off when absent or <= 0
local bound = #due > 0 and redis.call('HGET', KEYS[3] .. 'meta', 'events') or nil
if bound then
  if not string.match(bound, '^%-?%d+$') then return redis.error_reply('EMQ hash value is not an integer') end
  bound = tonumber(bound)
  if bound <= 0 then bound = nil end
end
for _, id in ipairs(due) do
  local row = KEYS[3] .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
  local seen = redis.call('HMGET', row, 'priority', 'attempts')
  redis.call('ZADD', KEYS[2], tonumber(seen[1] or '0'), id)
  redis.call('HSET', row, 'state', 'pending')
  if bound then
    redis.call('XADD', KEYS[3] .. 'events', 'MAXLEN', bound, '*', 'type', 'promoted', 'id', id,
      'attempt', seen[2] or '0', 'state', 'pending')
  end
end
if #due > 0 then redis.call('ZADD', KEYS[3] .. 'wake', 0, 'w') end  -- claimable now: wake the waiters
return #due
