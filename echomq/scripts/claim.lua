-- EMQ claim (wire 4). KEYS: pending, active, base. ARGV: lease_ms.
-- The client has read `meta paused` in its own round trip before this runs.
-- Pop first, check after: a ghost (an id with no row) is consumed and answers empty.
-- the queue's event switch (docs/spec.md §12): an integer bound (MAXLEN), off when absent or <= 0
local bound = redis.call('HGET', KEYS[3] .. 'meta', 'events')
if bound then
  if not string.match(bound, '^%-?%d+$') then return redis.error_reply('EMQ hash value is not an integer') end
  bound = tonumber(bound)
  if bound <= 0 then bound = nil end
end
local popped = redis.call('ZPOPMIN', KEYS[1])
if #popped == 0 then return {} end
local id = popped[1]
local row = KEYS[3] .. 'job:' .. id
if redis.call('EXISTS', row) == 0 then return {} end
-- attempts is the fencing token the holder presents from now on
local attempts = redis.call('HINCRBY', row, 'attempts', 1)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', row, 'state', 'active', 'started', now)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), id)
if bound then
  redis.call('XADD', KEYS[3] .. 'events', 'MAXLEN', bound, '*', 'type', 'claimed', 'id', id, 'attempt', attempts)
end
return {id, redis.call('HGET', row, 'payload'), attempts}
