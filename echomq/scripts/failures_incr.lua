-- EMQ failures.incr (wire 4). KEYS: active, pending, schedule, dead, base.
-- ARGV: id, token, error, max_attempts, backoff_ms, traceback (optional).
-- FAIL's arguments in FAIL's order, and FAIL's move and checks (failures' = failures + 1, dead
-- when failures' >= max_attempts; the traceback, when given, written beside last_error; the `failed` event then `retried` or `dead`
-- when `meta events` is on; the wake marker when the job is claimable or due before the
-- schedule's head), and `dead` on the job's outcome channel when it dies, where the caller may
-- publish (docs/spec.md §12). FAIL's bounds on the error and the traceback (EMQARG).
local base = KEYS[5]
local refused = failure_refused(ARGV[3], ARGV[6])  -- the arguments first, as the native verb
if refused then return refused end
local id = ARGV[1]
local row = base .. 'job:' .. id
local held, answer = fence('EMQ.FAILURES.INCR', row, id, ARGV[2], KEYS[1], 'active')
if not held then return answer end
local bound
bound, refused = event_switch(base)
if refused then return refused end
-- the first write: a failures field HINCRBY refuses stops the script before any other
local failures = redis.call('HINCRBY', row, 'failures', 1)
redis.call('ZREM', KEYS[1], id)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state, wake
if failures >= tonumber(ARGV[4]) then
  state = 'dead'
  redis.call('ZADD', KEYS[4], now, id)
elseif tonumber(ARGV[5]) == 0 then
  state = 'pending'
  redis.call('ZADD', KEYS[2], tonumber(redis.call('HGET', row, 'priority') or '0'), id)
  wake = true  -- claimable now
else
  state = 'scheduled'
  local due = now + tonumber(ARGV[5])
  wake = schedule_due(KEYS[3], id, due)
end
local failure = {'state', state, 'last_error', ARGV[3], 'failed', now}
if ARGV[6] then failure[7], failure[8] = 'traceback', ARGV[6] end
redis.call('HSET', row, unpack(failure))
if state == 'dead' then redis.call('HINCRBY', base .. 'metrics:failed', 'count', 1) end
add_event(base, bound, 'failed', id, ARGV[2], 'error', ARGV[3])
add_event(base, bound, state == 'dead' and 'dead' or 'retried', id, ARGV[2], 'state', state)
-- the wake marker, the last write
if wake then redis.call('ZADD', base .. 'wake', 0, 'w') end
if state == 'dead' then tell_outcome(base, id, 'dead') end
return state
