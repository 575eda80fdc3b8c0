-- EMQ remove (wire 4). KEYS: pending, schedule, dead, base. ARGV: id.
-- Deletes a waiting (pending, scheduled) or dead job: the row and its set membership go
-- together. No row answers 0; an active job is refused (cancel it); so are a lane row, a
-- flow child, and a row missing from the set its state names. Reply: the state removed from.
local row = KEYS[4] .. 'job:' .. ARGV[1]
if redis.call('EXISTS', row) == 0 then return 0 end
local seen = redis.call('HMGET', row, 'group', 'parent', 'state')
local state = seen[3]
if seen[1] then return redis.error_reply('EMQSTATE lane row is not native') end
if seen[2] then return redis.error_reply('EMQSTATE flow child is not native') end
if state == 'active' then return redis.error_reply('EMQSTATE EMQ.REMOVE row is active: cancel it instead') end
local set = ({pending = KEYS[1], scheduled = KEYS[2], dead = KEYS[3]})[state or '']
if not set then
  return redis.error_reply('EMQSTATE EMQ.REMOVE row ' .. (state and 'is ' .. state or 'has no state')
    .. ', not pending, scheduled or dead')
end
if not redis.call('ZSCORE', set, ARGV[1]) then
  return redis.error_reply('EMQSTATE EMQ.REMOVE id is not in ' .. (state == 'scheduled' and 'schedule' or state))
end
-- the queue's event switch (docs/spec.md §12): an integer bound (MAXLEN), off when absent or <= 0
local bound = redis.call('HGET', KEYS[4] .. 'meta', 'events')
if bound then
  if not string.match(bound, '^%-?%d+$') then return redis.error_reply('EMQ hash value is not an integer') end
  bound = tonumber(bound)
  if bound <= 0 then bound = nil end
end
local attempt = redis.call('HGET', row, 'attempts') or '0'
redis.call('ZREM', set, ARGV[1])
redis.call('DEL', row)
if bound then
  redis.call('XADD', KEYS[4] .. 'events', 'MAXLEN', bound, '*', 'type', 'removed', 'id', ARGV[1], 'attempt', attempt,
    'state', state)
end
return state
