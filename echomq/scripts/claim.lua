-- EMQ claim (wire 4). KEYS: pending, active, base. ARGV: lease_ms, rated (optional).
-- The client has read `meta paused` in its own round trip before this runs.
-- Pop first, check after: a ghost (an id with no row) is consumed and answers empty.
-- A queue with a rate limit in its meta (docs/spec.md §13) checks its sliding log of starts
-- first: when the window holds the limit, nothing is popped and the answer is empty, or, when
-- ARGV[2] (`rated`) is given, the ms until a start may happen.
local meta = redis.call('HMGET', KEYS[3] .. 'meta', 'events', 'rate_limit', 'rate_window')
-- the queue's event switch (docs/spec.md §12): an integer bound (MAXLEN), off when absent or <= 0
local bound = meta[1]
if bound then
  if not string.match(bound, '^%-?%d+$') then return redis.error_reply('EMQ hash value is not an integer') end
  bound = tonumber(bound)
  if bound <= 0 then bound = nil end
end
-- the rate limit: `rate_limit` starts in any `rate_window` ms; off when absent or <= 0
local limit, window = meta[2], meta[3]
if limit then
  if not string.match(limit, '^%-?%d+$') then return redis.error_reply('EMQ hash value is not an integer') end
  limit = tonumber(limit)
  if limit <= 0 then
    limit = nil
  else
    if window and not string.match(window, '^%-?%d+$') then
      return redis.error_reply('EMQ hash value is not an integer')
    end
    window = tonumber(window)
    if limit > 10000 or not window or window < 1 or window > 86400000 then
      return redis.error_reply('EMQ rate limit must be 1 to 10000 starts per rate_window of 1 to 86400000 ms')
    end
  end
end
local log = limit and KEYS[3] .. 'rate'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if limit then
  local since = now - window
  local recent = redis.call('ZCOUNT', log, '(' .. since, '+inf')
  if recent >= limit then
    if redis.call('ZCARD', KEYS[1]) == 0 then return {} end
    if not ARGV[2] then return {} end
    -- the start whose leaving brings the count under the limit
    local frees = redis.call('ZRANGEBYSCORE', log, '(' .. since, '+inf', 'WITHSCORES', 'LIMIT', recent - limit, 1)
    return math.max(1, tonumber(frees[2]) + window - now)
  end
end
local popped = redis.call('ZPOPMIN', KEYS[1])
if #popped == 0 then return {} end
local id = popped[1]
local row = KEYS[3] .. 'job:' .. id
-- the payload, read with the ghost check: every row a verb writes holds `state`
local seen = redis.call('HMGET', row, 'payload', 'state')
if not seen[1] and not seen[2] then return {} end
-- attempts is the fencing token the holder presents from now on
local attempts = redis.call('HINCRBY', row, 'attempts', 1)
redis.call('HSET', row, 'state', 'active', 'started', now)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), id)
if bound then
  redis.call('XADD', KEYS[3] .. 'events', 'MAXLEN', bound, '*', 'type', 'claimed', 'id', id, 'attempt', attempts)
end
if limit then
  -- the start logged; the log's stale entries out, and it expires a window from now
  redis.call('ZREMRANGEBYSCORE', log, '-inf', now - window)
  redis.call('ZADD', log, now, id .. ':' .. attempts)
  redis.call('PEXPIRE', log, window)
end
return {id, seen[1], attempts}
