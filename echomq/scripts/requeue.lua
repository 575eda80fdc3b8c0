-- EMQ requeue (wire 4). KEYS: active, pending, base. ARGV: id, token.
-- The holder releases its job to pending at its priority; no counter is written, so no
-- budget is spent. A matching token on a row that is not active is refused (SPEC §9.1).
-- The `requeued` event when on. The job is claimable again: it writes the wake marker.
local row = KEYS[3] .. 'job:' .. ARGV[1]
local held, answer = fence('EMQ.REQUEUE', row, ARGV[1], ARGV[2], KEYS[1], 'active')
if not held then return answer end
local bound, refused = event_switch(KEYS[3])
if refused then return refused end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], tonumber(redis.call('HGET', row, 'priority') or '0'), ARGV[1])
redis.call('HSET', row, 'state', 'pending')
add_event(KEYS[3], bound, 'requeued', ARGV[1], ARGV[2], 'state', 'pending')
redis.call('ZADD', KEYS[3] .. 'wake', 0, 'w')  -- claimable now: wake the waiters
return 1
