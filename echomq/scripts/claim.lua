-- EMQ claim (wire 4). KEYS: pending, active, base. ARGV: lease_ms, rated (optional). After lib/claim.lua.
-- The client has read `meta paused` in its own round trip before this runs.
-- Pop first, check after: a ghost (an id with no row) is consumed and answers empty.
-- A queue with a rate limit in its meta (docs/spec.md §13) checks its sliding log of starts:
-- when the window holds the limit, the popped job goes back where it was and the answer is
-- empty, or, when ARGV[2] (`rated`) is given, the ms until a start may happen.
local base = KEYS[3]
local popped = redis.call('ZPOPMIN', KEYS[1])
local id = popped[1]
local row = id and base .. 'job:' .. id
-- puts the popped job back where it was: a refusal or a held start leaves pending as it found it
local function back()
  if id then redis.call('ZADD', KEYS[1], popped[2], id) end
end
-- one read for the row and meta (the row counted twice, meta once); `meta` is read only when it
-- exists. Refused reads (an ACL without meta, a wrong type) put the job back before answering.
local seen = id and redis.pcall('EXISTS', row, row, base .. 'meta') or redis.pcall('EXISTS', base .. 'meta')
if type(seen) == 'table' then back(); return seen end
local bound, limit, window, refused
if seen % 2 == 1 then
  bound, limit, window, refused = switches(base .. 'meta')
  if refused then back(); return refused end
end
if not id then return {} end
local log = limit and base .. 'rate'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if limit then
  local since = now - window
  local recent = redis.pcall('ZCOUNT', log, '(' .. since, '+inf')
  if type(recent) == 'table' then back(); return recent end  -- a wrong-typed log
  if recent >= limit then
    back()
    if not ARGV[2] then return {} end
    -- the start whose leaving brings the count under the limit
    local frees = redis.call('ZRANGEBYSCORE', log, '(' .. since, '+inf', 'WITHSCORES', 'LIMIT', recent - limit, 1)
    return math.max(1, tonumber(frees[2]) + window - now)
  end
end
if seen < 2 then return {} end
-- attempts is the fencing token the holder presents from now on
local attempts = redis.call('HINCRBY', row, 'attempts', 1)
redis.call('HSET', row, 'state', 'active', 'started', now)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), id)
if bound then
  redis.call('XADD', base .. 'events', 'MAXLEN', bound, '*', 'type', 'claimed', 'id', id, 'attempt', attempts)
end
if limit then
  -- the start logged; the log's stale entries out, and it expires a window from now
  redis.call('ZREMRANGEBYSCORE', log, '-inf', now - window)
  redis.call('ZADD', log, now, id .. ':' .. attempts)
  redis.call('PEXPIRE', log, window)
end
return {id, redis.call('HGET', row, 'payload'), attempts}
