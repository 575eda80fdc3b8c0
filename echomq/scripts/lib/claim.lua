-- What CLAIM and CLAIMS share (docs/spec.md §12, §13, §17): the reading of the queue's meta, the
-- rate limit's wait and log, and the start of one job. Loaded after lib/events.lua by claim.lua and
-- claims.lua, and by lane_claim and flow_claim after their family's library (a lane or flow start
-- counts against the queue's rate limit too).
-- switches(meta) -> paused, bound, limit, window: from one read of meta, whether the queue is paused
-- (`paused` present, any value: then nothing else is read, a paused queue claims nothing whatever
-- its switches say), the event switch (an integer MAXLEN; nil when absent or <= 0) and the rate
-- limit (`limit` starts in any `window` ms; nil when absent or <= 0); or, for a refused read or a
-- malformed value, nil, nil, nil, nil and the error reply.
local function switches(meta)
  local m = redis.pcall('HMGET', meta, 'paused', 'events', 'rate_limit', 'rate_window')
  if m.err then return nil, nil, nil, nil, m end
  if m[1] then return true end
  local paused = false
  local bound, refused = event_bound(m[2])
  if refused then return nil, nil, nil, nil, refused end
  local limit, window = m[3], m[4]
  if limit then
    if not string.match(limit, '^%-?%d+$') then
      return nil, nil, nil, nil, redis.error_reply('EMQ hash value is not an integer')
    end
    limit = tonumber(limit)
    if limit <= 0 then
      return paused, bound, nil, nil
    end
    if window and not string.match(window, '^%-?%d+$') then
      return nil, nil, nil, nil, redis.error_reply('EMQ hash value is not an integer')
    end
    window = tonumber(window)
    if limit > 10000 or not window or window < 1 or window > 86400000 then
      return nil, nil, nil, nil,
        redis.error_reply('EMQ rate limit must be 1 to 10000 starts per rate_window of 1 to 86400000 ms')
    end
    return paused, bound, limit, window
  end
  return paused, bound, nil, nil
end

-- queue_switches(meta) -> paused, bound, limit, window: switches() of a meta that exists (one EXISTS
-- first: a queue without one is not paused and has no switches); or its refusal, as switches'
local function queue_switches(meta)
  local seen = redis.pcall('EXISTS', meta)
  if type(seen) == 'table' then return nil, nil, nil, nil, seen end
  if seen == 1 then return switches(meta) end
  return false
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

-- next_count(value) -> a counter's value + 1, as HINCRBY makes it, for a value Lua holds exactly
-- (none, or a plain decimal of at most 14 digits); nil for any other (the caller leaves it to
-- HINCRBY, which refuses what is not an integer)
local function next_count(value)
  if not value then return 1 end
  if #value <= 14 and (value == '0' or string.match(value, '^%-?[1-9]%d*$')) then return tonumber(value) + 1 end
end

-- the leases gathered in `leases` ({deadline, id, ...}) into `active`, in one ZADD; the list emptied
local function lease_all(active, leases)
  if leases and #leases > 0 then
    redis.call('ZADD', active, unpack(leases))
    for i = #leases, 1, -1 do leases[i] = nil end
  end
end

-- start(base, id, row, attempts, lease, now, bound, log, window) -> the job's new attempts: the
-- writes that start one job whose row exists and whose `attempts` read `attempts` (one HSET of
-- the new count, the state and the start time), and its lease, `lease` = {active, lease_ms,
-- leases}: ZADD active at now + lease_ms, or, given `leases` (a run that tells nothing per job: no
-- events, no rate log), onto that list for the run's one ZADD (lease_all). `bound` (the event
-- switch) and `log` (the rate limit's log of starts, nil without a limit) as switches() and the
-- caller found them.
local function start(base, id, row, attempts, lease, now, bound, log, window)
  -- attempts is the fencing token the holder presents from now on
  local next = next_count(attempts)
  if next then
    redis.call('HSET', row, 'attempts', next, 'state', 'active', 'started', now)
  else
    lease_all(lease[1], lease[3])  -- HINCRBY may refuse this one: the run so far is leased first
    next = redis.call('HINCRBY', row, 'attempts', 1)
    redis.call('HSET', row, 'state', 'active', 'started', now)
  end
  local deadline, leases = now + tonumber(lease[2]), lease[3]
  if leases then
    leases[#leases + 1], leases[#leases + 2] = deadline, id
  else
    redis.call('ZADD', lease[1], deadline, id)
  end
  add_event(base, bound, 'claimed', id, next)
  if log then log_start(log, now, window, id, next) end
  return next
end
