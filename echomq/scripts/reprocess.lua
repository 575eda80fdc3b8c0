-- EMQ reprocess (wire 4). KEYS: dead, pending, base. ARGV: id.
-- Loaded after lib/events.lua, lib/held.lua, lib/pending.lua.
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
local refused = foreign_refused(seen[2]) or state_refused(seen[3], 'dead')
if refused then return refused end
local bound, refused = event_switch(KEYS[3])
if refused then return refused end
redis.call('ZREM', KEYS[1], ARGV[1])
to_pending(KEYS[2], row, ARGV[1])
redis.call('HSET', row, 'state', 'pending', 'failures', '0', 'stalled', '0')
add_event(KEYS[3], bound, 'reprocessed', ARGV[1], seen[1] or '0', 'state', 'pending')
wake(KEYS[3])  -- claimable now: wake the waiters
return 1
