-- EMQ requeue (wire 4). KEYS: active, pending, base. ARGV: id, token.
-- The holder releases its job to pending at its priority; no counter is written, so no
-- budget is spent. A matching token on a row that is not active is refused (SPEC §9.1).
-- The `requeued` event when on. The job is claimable again: it writes the wake marker.
local row = KEYS[3] .. 'job:' .. ARGV[1]
local held = redis.call('HMGET', row, 'attempts', 'state')
if held[1] ~= ARGV[2] then return 0 end
if held[2] ~= 'active' then
  return redis.error_reply('EMQSTATE EMQ.REQUEUE row ' .. (held[2] and 'is ' .. held[2] or 'has no state') .. ', not active')
end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return redis.error_reply('EMQSTATE EMQ.REQUEUE id is not in active') end
-- the queue's event switch (docs/spec.md §12): an integer bound (MAXLEN), off when absent or <= 0
local bound = redis.call('HGET', KEYS[3] .. 'meta', 'events')
if bound then
  if not string.match(bound, '^%-?%d+$') then return redis.error_reply('EMQ hash value is not an integer') end
  bound = tonumber(bound)
  if bound <= 0 then bound = nil end
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], tonumber(redis.call('HGET', row, 'priority') or '0'), ARGV[1])
redis.call('HSET', row, 'state', 'pending')
if bound then
  redis.call('XADD', KEYS[3] .. 'events', 'MAXLEN', bound, '*', 'type', 'requeued', 'id', ARGV[1], 'attempt', ARGV[2],
    'state', 'pending')
end
redis.call('ZADD', KEYS[3] .. 'wake', 0, 'w')  -- claimable now: wake the waiters
return 1
