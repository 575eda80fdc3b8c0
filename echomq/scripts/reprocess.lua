-- EMQ reprocess (wire 4). KEYS: dead, pending, base. ARGV: id.
-- A dead job goes back to pending at its priority with both budgets refilled (SPEC §9.2):
-- failures and stalled start again from 0; attempts, the fencing token, is kept.
-- A ghost (in dead, no row) leaves dead and answers 0; a member of dead whose row is not
-- dead, or is a lane row (lane_reprocess moves those, keeping its group's order), is refused.
-- The `reprocessed` event when on.
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local row = KEYS[3] .. 'job:' .. ARGV[1]
if redis.call('EXISTS', row) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
local seen = redis.call('HMGET', row, 'attempts', 'group', 'state')
local state = seen[3]
if seen[2] then return redis.error_reply('EMQSTATE lane row is not native') end
if state ~= 'dead' then
  return redis.error_reply('EMQSTATE EMQ.REPROCESS row ' .. (state and 'is ' .. state or 'has no state') .. ', not dead')
end
-- the queue's event switch (docs/spec.md §12): an integer bound (MAXLEN), off when absent or <= 0
local bound = redis.call('HGET', KEYS[3] .. 'meta', 'events')
if bound then
  if not string.match(bound, '^%-?%d+$') then return redis.error_reply('EMQ hash value is not an integer') end
  bound = tonumber(bound)
  if bound <= 0 then bound = nil end
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], tonumber(redis.call('HGET', row, 'priority') or '0'), ARGV[1])
redis.call('HSET', row, 'state', 'pending', 'failures', '0', 'stalled', '0')
if bound then
  redis.call('XADD', KEYS[3] .. 'events', 'MAXLEN', bound, '*', 'type', 'reprocessed', 'id', ARGV[1],
    'attempt', seen[1] or '0', 'state', 'pending')
end
redis.call('ZADD', KEYS[3] .. 'wake', 0, 'w')  -- claimable now: wake the waiters
return 1
