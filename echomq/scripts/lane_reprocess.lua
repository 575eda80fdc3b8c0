-- EMQ lane_reprocess (both wires). KEYS: dead, base. ARGV: id.
-- REPROCESS's twin for a lane row: a dead lane job goes back to the tail of its group's lane (a
-- new `seq`, as if enqueued again) with both budgets refilled (SPEC §9.2): failures and stalled
-- start again from 0; attempts, the fencing token, is kept. A ghost (in dead, no row) leaves dead
-- and answers 0; a member of dead whose row is not dead, or has no group, is refused. The
-- `reprocessed` event when on.
lanes(KEYS[2])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local row = base .. 'job:' .. ARGV[1]
if redis.call('EXISTS', row) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
local seen = redis.call('HMGET', row, 'attempts', 'group', 'state')
local g, state = seen[2], seen[3]
if not g then return redis.error_reply('EMQSTATE lane_reprocess row is not a lane row') end
if state ~= 'dead' then
  return redis.error_reply('EMQSTATE lane_reprocess row ' .. (state and 'is ' .. state or 'has no state') .. ', not dead')
end
-- the queue's event switch (docs/spec.md §12): an integer bound (MAXLEN), off when absent or <= 0
local bound = redis.call('HGET', base .. 'meta', 'events')
if bound then
  if not string.match(bound, '^%-?%d+$') then return redis.error_reply('EMQ hash value is not an integer') end
  bound = tonumber(bound)
  if bound <= 0 then bound = nil end
end
local seq = redis.call('INCR', base .. 'lanes:seq')
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', base .. 'lane:' .. g, seq, ARGV[1])
redis.call('HSET', row, 'state', 'pending', 'failures', '0', 'stalled', '0', 'seq', seq)
redis.call('SADD', base .. 'lanes:groups', g)
if bound then
  redis.call('XADD', base .. 'events', 'MAXLEN', bound, '*', 'type', 'reprocessed', 'id', ARGV[1],
    'attempt', seen[1] or '0', 'state', 'pending')
end
if offer(g) then wake() end
return 1
