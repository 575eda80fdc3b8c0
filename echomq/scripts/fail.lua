-- EMQ fail (wire 4). KEYS: active, pending, schedule, dead, base.
-- ARGV: id, token, error, max_attempts, backoff_ms, traceback (optional).
-- One budget on both wires (SPEC §9.1): failures' = failures + 1, dead when failures' >= max_attempts.
-- Every outcome records the error, the time and, when given, the traceback (docs/spec.md §11.6).
-- A matching token on a row that is not active (a repeated terminal failure included), or not
-- in active, is refused before any write. The `failed` event, then `retried` or `dead`, when on.
-- An error over 4096 bytes or a traceback over 8192 is refused (EMQARG) first, as the native verb's.
local base = KEYS[5]
local refused = failure_refused(ARGV[3], ARGV[6])  -- the arguments first, as the native verb
if refused then return refused end
local row = base .. 'job:' .. ARGV[1]
local held, answer = fence('EMQ.FAIL', row, ARGV[1], ARGV[2], KEYS[1], 'active')
if not held then return answer end
-- the queue's event switch, and whether a result waiter follows the queue (`waiters` present and
-- not 0), read with it
local switches = redis.call('HMGET', base .. 'meta', 'events', 'waiters')
local waited = switches[2] and switches[2] ~= '0'
local bound
bound, refused = event_bound(switches[1])
if refused then return refused end
-- the `failed` event, then `retried` or `dead`, when the queue's events are on
local function tell(state)
  add_event(base, bound, 'failed', ARGV[1], ARGV[2], 'error', ARGV[3])
  add_event(base, bound, state == 'dead' and 'dead' or 'retried', ARGV[1], ARGV[2], 'state', state)
end
-- the first write: a failures field HINCRBY refuses stops the script before any other
local failures = redis.call('HINCRBY', row, 'failures', 1)
redis.call('ZREM', KEYS[1], ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local failure = {'last_error', ARGV[3], 'failed', now}
if ARGV[6] then failure[5], failure[6] = 'traceback', ARGV[6] end
if failures >= tonumber(ARGV[4]) then
  -- the dead score is the time it died (purge by age)
  redis.call('ZADD', KEYS[4], now, ARGV[1])
  redis.call('HSET', row, 'state', 'dead', unpack(failure))
  redis.call('HINCRBY', base .. 'metrics:failed', 'count', 1)
  tell('dead')
  -- the death, told to result waiters where the caller may publish
  if waited then tell_outcome(base, ARGV[1], 'dead') end
  return 'dead'
end
local backoff = tonumber(ARGV[5])
if backoff == 0 then
  redis.call('ZADD', KEYS[2], tonumber(redis.call('HGET', row, 'priority') or '0'), ARGV[1])
  redis.call('HSET', row, 'state', 'pending', unpack(failure))
  tell('pending')
  redis.call('ZADD', base .. 'wake', 0, 'w')  -- claimable now: wake the waiters (the last write)
  return 'pending'
end
local first = schedule_due(KEYS[3], ARGV[1], now + backoff)
redis.call('HSET', row, 'state', 'scheduled', unpack(failure))
tell('scheduled')
if first then redis.call('ZADD', base .. 'wake', 0, 'w') end  -- the last write
return 'scheduled'
