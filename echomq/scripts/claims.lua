-- EMQ claims (wire 4). KEYS: pending, active, base. ARGV: lease_ms, count, rated (optional). After
-- lib/claim.lua.
-- Up to `count` claims in a row, each as claim.lua makes it, in one step: a ghost (an id with no
-- row) is popped and passed over, uncounted; the run stops at the first claim that would claim
-- nothing (pending empty, or the rate limit holding it). The client has read `meta paused` in
-- its own round trip before this runs. Reply: each claimed job's {id, payload, attempts}, then,
-- when the rate limit stopped the run and ARGV[3] (`rated`) is given, the ms until a start may
-- happen (docs/spec.md §3, CLAIMS).
local count = ARGV[2]
if not string.match(count, '^%d+$') or #count > 4 or tonumber(count) < 1 or tonumber(count) > 1000 then
  return redis.error_reply("EMQARG count must be from 1 to 1000, got '" .. count .. "'")
end
count = tonumber(count)
local base = KEYS[3]
local meta = base .. 'meta'
-- meta's fields, read once and only when it exists (a refused read answers before any write)
local seen = redis.pcall('EXISTS', meta)
if type(seen) == 'table' then return seen end
local bound, limit, window, refused
if seen == 1 then
  bound, limit, window, refused = switches(meta)
  if refused then return refused end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local log = limit and base .. 'rate'
local recent = 0
if limit then
  recent = redis.pcall('ZCOUNT', log, '(' .. (now - window), '+inf')
  if type(recent) == 'table' then return recent end  -- a wrong-typed log
end
local replies = {}
local claimed = 0
while claimed < count do
  local popped = redis.call('ZPOPMIN', KEYS[1])
  local id = popped[1]
  if not id then break end
  if limit and recent >= limit then
    -- held: the job goes back where it was, and a rated caller reads the wait
    redis.call('ZADD', KEYS[1], popped[2], id)
    if ARGV[3] then replies[#replies + 1] = rate_wait(log, now, window, recent, limit) end
    break
  end
  if redis.call('EXISTS', base .. 'job:' .. id) == 1 then
    replies[#replies + 1] = start(base, KEYS[2], id, now, ARGV[1], bound, log, window)
    claimed = claimed + 1
    if limit then recent = recent + 1 end
  end
end
return replies
