-- EMQ flow_fail (both wires). KEYS: flow:active, flow:pending, flow:schedule, base.
-- ARGV: id, token, error, max_attempts, backoff_ms, traceback.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/failure.lua, lib/flow.lua.
-- An empty traceback writes none.
-- An error over 4096 bytes or a traceback over 8192 is refused (EMQARG), as FAIL's.
-- FAILURES.INCR for a flow job: failures' = failures + 1; below max_attempts it retries
-- (flow:active -> flow:pending, or flow:schedule after backoff_ms); at it, it dies and its parent
-- is told (lib/flow.lua). Reply: pending, scheduled or dead; 0 when no row or the token does not
-- match; EMQSTATE when the row is not active in flow:active. Events when on: `failed`, then
-- `retried` (its state) or `dead` (and its parent's, when told to die).
local base, id = KEYS[4], ARGV[1]
local refused = failure_refused(ARGV[3], ARGV[6])
if refused then return refused end
local row = base .. 'job:' .. id
local held, answer = fence(row, id, ARGV[2], KEYS[1], 'flow:active')
if not held then return answer end
refused = flow_switches(row)
if refused then return refused end
-- the first write: a failures field HINCRBY refuses stops the script before any other
local failures = redis.call('HINCRBY', row, 'failures', 1)
redis.call('ZREM', KEYS[1], id)
local now = now_ms()
if ARGV[6] ~= '' then redis.call('HSET', row, 'traceback', ARGV[6]) end
flow_event(base, 'failed', id, ARGV[2], 'error', ARGV[3])
if failures >= tonumber(ARGV[4]) then
  flow_die(base, id, ARGV[3], now)
  return 'dead'
end
local state = 'pending'
if tonumber(ARGV[5]) == 0 then
  to_pending(KEYS[2], row, id)
  wake(base)
else
  state = 'scheduled'
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[5]), id)
end
redis.call('HSET', row, 'state', state, 'last_error', ARGV[3], 'failed', now)
flow_event(base, 'retried', id, ARGV[2], 'state', state)
return state
