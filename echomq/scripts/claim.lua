-- EMQ claim (wire 4). KEYS: pending, active, base. ARGV: lease_ms, rated (optional).
-- Loaded after lib/clock.lua, lib/events.lua, lib/claim.lua.
-- Meta is read first, once, and only when it exists: a paused queue (`paused`, any value) answers
-- empty and writes nothing; a refused read or a malformed switch answers its refusal. (The client
-- sends its own pause read in the same round trip, SPEC §4: it tells a paused queue from an empty
-- one.) Then pop first, check after: a ghost (an id with no row) is consumed and answers empty.
-- A queue with a rate limit in its meta (docs/spec.md §13) checks its sliding log of starts:
-- when the window holds the limit, the popped job goes back where it was and the answer is
-- empty, or, when ARGV[2] (`rated`) is given, the ms until a start may happen.
local base = KEYS[3]
local paused, bound, limit, window, refused = queue_switches(base .. 'meta')
if refused then return refused end
if paused then return {} end
local popped = redis.call('ZPOPMIN', KEYS[1])
local id = popped[1]
if not id then return {} end
local log = limit and base .. 'rate'
local now = now_ms()
if limit then
  -- a held start puts the popped job back where it was: pending as it found it
  local recent = redis.pcall('ZCOUNT', log, '(' .. (now - window), '+inf')
  if type(recent) == 'table' or recent >= limit then redis.call('ZADD', KEYS[1], popped[2], id) end
  if type(recent) == 'table' then return recent end  -- a wrong-typed log
  if recent >= limit then
    if not ARGV[2] then return {} end
    return rate_wait(log, now, window, recent, limit)
  end
end
local row = base .. 'job:' .. id
-- the row's existence with its fields: a row the scripts made has a state at least
local job = redis.call('HMGET', row, 'attempts', 'payload', 'state')
if not (job[1] or job[2] or job[3]) then return {} end
return {id, job[2], start(base, id, row, job[1], {KEYS[2], ARGV[1]}, now, bound, log, window)}
