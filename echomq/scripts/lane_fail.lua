-- EMQ lane_fail (both wires). KEYS: lanes:active, dead, base.
-- ARGV: id, token, error, max_attempts, backoff_ms, traceback.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/failure.lua, lib/lanes.lua.
-- The traceback is always given ('' for none). An error over 4096 bytes or a traceback over 8192
-- is refused (EMQARG), as FAIL's.
-- FAIL's budget (SPEC §9.1): failures' = failures + 1, dead when failures' >= max_attempts.
-- A retry goes back to its place at the head of its lane, so the group's order is kept; with a
-- backoff the whole group waits that long. Reply: pending (at once), scheduled (after the
-- backoff) or dead. The events when on: `failed`, then `dead` or `retried` (with the row's state:
-- pending, back in its lane, even while its group waits out the backoff).
lanes(KEYS[3])
local refused = failure_refused(ARGV[3], ARGV[6])
if refused then return refused end
local row, g = held_row(ARGV[1], ARGV[2])
if not row then return g end
local bound
bound, refused = event_switch(base)
if refused then return refused end
local failures = redis.call('HINCRBY', row, 'failures', 1)
redis.call('ZREM', KEYS[1], ARGV[1])
local now = now_ms()
local failure = {'last_error', ARGV[3], 'failed', now}
if ARGV[6] ~= '' then failure[5], failure[6] = 'traceback', ARGV[6] end
if failures >= tonumber(ARGV[4]) then
  redis.call('ZADD', KEYS[2], now, ARGV[1])
  redis.call('HSET', row, 'state', 'dead', unpack(failure))
  redis.call('HINCRBY', base .. 'metrics:failed', 'count', 1)
  add_event(base, bound, 'failed', ARGV[1], ARGV[2], 'error', ARGV[3])
  add_event(base, bound, 'dead', ARGV[1], ARGV[2], 'state', 'dead')
  tell_outcome(base, ARGV[1], 'dead')
  free(g)
  return 'dead'
end
local backoff = tonumber(ARGV[5])
if backoff > 0 then hold(g, now + backoff) end
back_in_lane(row, ARGV[1], g, failure)
add_event(base, bound, 'failed', ARGV[1], ARGV[2], 'error', ARGV[3])
add_event(base, bound, 'retried', ARGV[1], ARGV[2], 'state', 'pending')
return backoff > 0 and 'scheduled' or 'pending'
