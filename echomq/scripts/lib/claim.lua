-- What CLAIM and CLAIMS share (docs/spec.md §12, §13, §17): the reading of the queue's meta, the
-- rate limit's wait and log, and the start of one job. The client puts this file (after
-- lib/events.lua) before claim.lua's and claims.lua's own text, and lane_claim's and flow_claim's
-- (after their family's library: a lane or flow start counts against the queue's rate limit too).
-- switches(meta) -> bound, limit, window: the event switch (an integer MAXLEN; nil when absent or
-- <= 0) and the rate limit (`limit` starts in any `window` ms; nil when absent or <= 0); or, for
-- a refused read or a malformed value, nil, nil, nil and the error reply. Meta must exist.
local function switches(meta)
  local m = redis.pcall('HMGET', meta, 'events', 'rate_limit', 'rate_window')
  if m.err then return nil, nil, nil, m end
  local bound, refused = event_bound(m[1])
  if refused then return nil, nil, nil, refused end
  local limit, window = m[2], m[3]
  if limit then
    if not string.match(limit, '^%-?%d+$') then
      return nil, nil, nil, redis.error_reply('EMQ hash value is not an integer')
    end
    limit = tonumber(limit)
    if limit <= 0 then
      return bound, nil, nil
    end
    if window and not string.match(window, '^%-?%d+$') then
      return nil, nil, nil, redis.error_reply('EMQ hash value is not an integer')
    end
    window = tonumber(window)
    if limit > 10000 or not window or window < 1 or window > 86400000 then
      return nil, nil, nil, redis.error_reply('EMQ rate limit must be 1 to 10000 starts per rate_window of 1 to 86400000 ms')
    end
    return bound, limit, window
  end
  return bound, nil, nil
end

-- rate_wait(log, now, window, recent, limit) -> the ms until a start may happen: when the start
-- whose leaving brings the window's count (`recent`) under the limit leaves it
local function rate_wait(log, now, window, recent, limit)
  local frees = redis.call('ZRANGEBYSCORE', log, '(' .. (now - window), '+inf', 'WITHSCORES', 'LIMIT', recent - limit, 1)
  return math.max(1, tonumber(frees[2]) + window - now)
end

-- a start logged in the rate limit's log (`id:attempts` at `now`); the log's stale entries out,
-- and it expires a window from now
local function log_start(log, now, window, id, attempts)
  redis.call('ZREMRANGEBYSCORE', log, '-inf', now - window)
  redis.call('ZADD', log, now, id .. ':' .. attempts)
  redis.call('PEXPIRE', log, window)
end

-- start(base, active, id, now, lease_ms, bound, log, window) -> {id, payload, attempts}: the
-- writes that claim one job whose row exists; `bound` (the event switch) and `log` (the rate
-- limit's log of starts, nil without a limit) as switches() and the caller found them
local function start(base, active, id, now, lease_ms, bound, log, window)
  local row = base .. 'job:' .. id
  -- attempts is the fencing token the holder presents from now on
  local attempts = redis.call('HINCRBY', row, 'attempts', 1)
  redis.call('HSET', row, 'state', 'active', 'started', now)
  redis.call('ZADD', active, now + tonumber(lease_ms), id)
  add_event(base, bound, 'claimed', id, attempts)
  if log then log_start(log, now, window, id, attempts) end
  return {id, redis.call('HGET', row, 'payload'), attempts}
end
