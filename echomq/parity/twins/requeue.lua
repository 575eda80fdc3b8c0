-- The parity instrument's model of EMQ.REQUEUE on a script node. Not shipped as a
-- verb: REQUEUE has no script (SPEC §4). Written from SPEC §3's row in the scripts'
-- own trusting style (compare the token and act), so the native verb's edges show
-- up as the same named differences as the scripted verbs' (§5.2, §5.5).
-- KEYS: active, pending, base. ARGV: id, token.
local row = KEYS[3] .. 'job:' .. ARGV[1]
if redis.call('HGET', row, 'attempts') ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], tonumber(redis.call('HGET', row, 'priority') or '0'), ARGV[1])
redis.call('HSET', row, 'state', 'pending')
return 1
