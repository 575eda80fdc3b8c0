-- EMQ fail (wire 4). KEYS: active, pending, schedule, dead, base.
-- ARGV: id, token, error, max_attempts, backoff_ms.
-- The scripted budget caps on attempts (the claim count): dead when attempts >= max_attempts.
local base = KEYS[5]
local row = base .. 'job:' .. ARGV[1]
local attempts = redis.call('HGET', row, 'attempts')
if attempts ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
if tonumber(attempts) >= tonumber(ARGV[4]) then
  redis.call('ZADD', KEYS[4], 0, ARGV[1])
  redis.call('HSET', row, 'state', 'dead', 'last_error', ARGV[3])
  redis.call('HINCRBY', base .. 'metrics:failed', 'count', 1)
  return 'dead'
end
local backoff = tonumber(ARGV[5])
if backoff == 0 then
  redis.call('ZADD', KEYS[2], tonumber(redis.call('HGET', row, 'priority') or '0'), ARGV[1])
  redis.call('HSET', row, 'state', 'pending', 'last_error', ARGV[3])
  redis.call('ZADD', base .. 'wake', 0, 'w')  -- claimable now: wake the waiters
  return 'pending'
end
local t = redis.call('TIME')
local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + backoff
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
redis.call('ZADD', KEYS[3], due, ARGV[1])
redis.call('HSET', row, 'state', 'scheduled', 'last_error', ARGV[3])
-- due before the schedule's head: a blocked worker recomputes its timeout
if head[2] == nil or due < tonumber(head[2]) then redis.call('ZADD', base .. 'wake', 0, 'w') end
return 'scheduled'
