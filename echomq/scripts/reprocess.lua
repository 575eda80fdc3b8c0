-- EMQ reprocess (wire 4). KEYS: dead, pending, base. ARGV: id.
-- A dead job goes back to pending at its priority; every counter is kept.
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local row = KEYS[3] .. 'job:' .. ARGV[1]
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], tonumber(redis.call('HGET', row, 'priority') or '0'), ARGV[1])
redis.call('HSET', row, 'state', 'pending')
redis.call('ZADD', KEYS[3] .. 'wake', 0, 'w')  -- claimable now: wake the waiters
return 1
