-- EMQ promote (wire 4). KEYS: schedule, pending, base. ARGV: limit.
-- Moves up to limit due jobs (score <= now, lowest first) to pending at their priority.
-- A ghost gets a partial row (state only): the script trusts the keyspace.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, id in ipairs(due) do
  local row = KEYS[3] .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], tonumber(redis.call('HGET', row, 'priority') or '0'), id)
  redis.call('HSET', row, 'state', 'pending')
end
if #due > 0 then redis.call('ZADD', KEYS[3] .. 'wake', 0, 'w') end  -- claimable now: wake the waiters
return #due
