-- EMQ fail (wire 4). KEYS: active, pending, schedule, dead, base.
-- ARGV: id, token, error, max_attempts, backoff_ms, traceback (optional).
-- One budget on both wires (SPEC §9.1): failures' = failures + 1, dead when failures' >= max_attempts.
-- Every outcome records the error, the time and, when given, the traceback (docs/spec.md §11.6).
-- A matching token on a row that is not active (a repeated terminal failure included), or not
-- in active, is refused before any write.
local base = KEYS[5]
local row = base .. 'job:' .. ARGV[1]
local held = redis.call('HMGET', row, 'attempts', 'state')
if held[1] ~= ARGV[2] then return 0 end
if held[2] ~= 'active' then
  return redis.error_reply('EMQSTATE EMQ.FAIL row ' .. (held[2] and 'is ' .. held[2] or 'has no state') .. ', not active')
end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return redis.error_reply('EMQSTATE EMQ.FAIL id is not in active') end
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
  return 'dead'
end
local backoff = tonumber(ARGV[5])
if backoff == 0 then
  redis.call('ZADD', KEYS[2], tonumber(redis.call('HGET', row, 'priority') or '0'), ARGV[1])
  redis.call('HSET', row, 'state', 'pending', unpack(failure))
  redis.call('ZADD', base .. 'wake', 0, 'w')  -- claimable now: wake the waiters
  return 'pending'
end
local due = now + backoff
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
redis.call('ZADD', KEYS[3], due, ARGV[1])
redis.call('HSET', row, 'state', 'scheduled', unpack(failure))
-- due before the schedule's head: a blocked worker recomputes its timeout
if head[2] == nil or due < tonumber(head[2]) then redis.call('ZADD', base .. 'wake', 0, 'w') end
return 'scheduled'
