-- EMQ lane_reprocess (both wires). KEYS: dead, base. ARGV: id.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/lanes.lua.
-- REPROCESS's twin for a lane row: a dead lane job goes back to the tail of its group's lane at
-- its priority (a new `seq`, as if enqueued again) with both budgets refilled (SPEC §9.2):
-- failures and stalled start again from 0; attempts, the fencing token, is kept. A ghost (in
-- dead, no row) leaves dead and answers 0; a member of dead whose row is not dead, or has no
-- group, is refused. The `reprocessed` event when on.
lanes(KEYS[2])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local row = base .. 'job:' .. ARGV[1]
if redis.call('EXISTS', row) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
local seen = redis.call('HMGET', row, 'attempts', 'group', 'priority', 'state')
local g, state = seen[2], seen[4]
if not g then return not_lane_row() end
local refused = state_refused(state, 'dead')
if refused then return refused end
local bound, refused = event_switch(base)
if refused then return refused end
local seq = redis.call('INCR', base .. 'lanes:seq')
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', base .. 'lane:' .. g, lane_score(seen[3], seq), ARGV[1])
redis.call('HSET', row, 'state', 'pending', 'failures', '0', 'stalled', '0', 'seq', seq)
redis.call('SADD', base .. 'lanes:groups', g)
add_event(base, bound, 'reprocessed', ARGV[1], seen[1] or '0', 'state', 'pending')
if offer(g) then wake(base) end
return 1
