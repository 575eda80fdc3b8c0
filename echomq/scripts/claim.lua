-- EMQ claim (wire 4). KEYS: pending, active, base. ARGV: lease_ms, rated (optional).
-- Loaded after lib/clock.lua, lib/events.lua, lib/claim.lua.
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
local now = now_ms()
if limit then
  local recent = redis.pcall('ZCOUNT', log, '(' .. (now - window), '+inf')
  if type(recent) == 'table' then back(); return recent end  -- a wrong-typed log
  if recent >= limit then
    back()
    if not ARGV[2] then return {} end
    return rate_wait(log, now, window, recent, limit)
  end
end
if seen < 2 then return {} end
local job = redis.call('HMGET', row, 'attempts', 'payload')
return {id, job[2], start(base, id, row, job[1], {KEYS[2], ARGV[1]}, now, bound, log, window)}
