-- EMQ claims (wire 4). KEYS: pending, active, base. ARGV: lease_ms, count, rated (optional).
-- Loaded after lib/clock.lua, lib/events.lua, lib/claim.lua.
-- Up to `count` claims in a row, each as claim.lua makes it, in one step: a ghost (an id with no
-- row) is popped and passed over, uncounted; the run stops at the first claim that would claim
-- nothing (pending empty, or the rate limit holding it). A paused queue answers empty and writes
-- nothing (the client sends its own pause read in the same round trip, SPEC §4: it tells a paused
-- queue from an empty one). Reply: each claimed job's {id, payload, attempts}, then,
-- when the rate limit stopped the run and ARGV[3] (`rated`) is given, the ms until a start may
-- happen (docs/spec.md §3, CLAIMS). The heads are popped as many at a time as the run may still
-- take (the rate limit's room, when it has one), and the leases go into active in one ZADD.
local count = ARGV[2]
if not string.match(count, '^%d+$') or #count > 4 or tonumber(count) < 1 or tonumber(count) > 1000 then
  return redis.error_reply("EMQARG count must be from 1 to 1000, got '" .. count .. "'")
end
count = tonumber(count)
local base = KEYS[3]
-- meta's fields, read once and only when it exists (a refused read answers before any write)
local paused, bound, limit, window, refused = queue_switches(base .. 'meta')
if refused then return refused end
if paused then return {} end
local now = now_ms()
local log = limit and base .. 'rate'
local recent = 0
if limit then
  recent = redis.pcall('ZCOUNT', log, '(' .. (now - window), '+inf')
  if type(recent) == 'table' then return recent end  -- a wrong-typed log
end
-- the leases: one ZADD for the run, unless each start tells something (an event, the rate log)
local lease = {KEYS[2], ARGV[1], not bound and not log and {} or nil}
local replies = {}
local claimed, held = 0, false
while claimed < count and not held do
  -- as many heads as the run may still take: a full window still pops one, to know a job waits
  local want = count - claimed
  if limit then want = math.max(1, math.min(want, limit - recent)) end
  local popped = redis.call('ZPOPMIN', KEYS[1], want)
  if #popped == 0 then break end
  for i = 1, #popped, 2 do
    local id = popped[i]
    if limit and recent >= limit then
      -- held: the jobs go back where they were, and a rated caller reads the wait
      for j = i, #popped, 2 do redis.call('ZADD', KEYS[1], popped[j + 1], popped[j]) end
      if ARGV[3] then replies[#replies + 1] = rate_wait(log, now, window, recent, limit) end
      held = true
      break
    end
    local row = base .. 'job:' .. id
    -- the row's existence with its fields: a row the scripts made has a state at least
    local job = redis.call('HMGET', row, 'attempts', 'payload', 'state')
    if job[1] or job[2] or job[3] then
      replies[#replies + 1] = {id, job[2], start(base, id, row, job[1], lease, now, bound, log, window)}
      claimed = claimed + 1
      if limit then recent = recent + 1 end
    end
  end
end
lease_all(KEYS[2], lease[3])
return replies
