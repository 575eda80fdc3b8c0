-- EMQ enqueues (wire 4). KEYS: pending, base. ARGV: id1, payload1, priority1, ... idk, payloadk, priorityk.
-- Loaded after lib/clock.lua, lib/events.lua.
-- ENQUEUE for each (id, payload, priority) triple, in order, in one step (docs/spec.md §20): every
-- row is read, every priority checked to be a number, and pending's type (and the event stream's,
-- when on) checked, before the first write; then each new job's
-- row, one ZADD of pending for all of them, each one's `enqueued` event when on, and the wake
-- marker once, unless it is there already (no worker has taken it since). Reply: one answer per
-- triple, ENQUEUE's: 1 created, 0 the id already has a row (or was enqueued earlier in the step).
local base = KEYS[2]
local replies, new, made = {}, {}, {}
for i = 1, #ARGV, 3 do
  local id = ARGV[i]
  if not tonumber(ARGV[i + 2]) then
    return redis.error_reply("EMQARG priority must be a number, got '" .. ARGV[i + 2] .. "'")
  end
  if made[id] or redis.call('EXISTS', base .. 'job:' .. id) == 1 then
    replies[#replies + 1] = 0
  else
    made[id] = true
    new[#new + 1] = i
    replies[#replies + 1] = 1
  end
end
if #new == 0 then return replies end
local meta, marker = base .. 'meta', base .. 'wake'
-- meta and the marker in one read (meta counts two, the marker one); no meta, no switch to read
local seen = redis.call('EXISTS', meta, meta, marker)
local bound, refused = event_bound(seen >= 2 and redis.call('HGET', meta, 'events'))
if refused then return refused end
-- the keys the batch adds to, checked once (ENQUEUE's ZADD or XADD would fail after its HSET)
for _, key in ipairs({KEYS[1], bound and base .. 'events'}) do
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'none' and kind ~= (key == KEYS[1] and 'zset' or 'stream') then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
  end
end
local created = now_ms()
local scores = {}
for _, i in ipairs(new) do
  local row, priority = base .. 'job:' .. ARGV[i], tonumber(ARGV[i + 2])
  if priority > 0 then
    redis.call('HSET', row, 'state', 'pending', 'payload', ARGV[i + 1], 'attempts', '0', 'created', created,
      'priority', ARGV[i + 2])
  else
    redis.call('HSET', row, 'state', 'pending', 'payload', ARGV[i + 1], 'attempts', '0', 'created', created)
  end
  scores[#scores + 1], scores[#scores + 2] = priority, ARGV[i]
end
-- unpack in slices: Lua's stack takes a few thousand values at most
for s = 1, #scores, 1000 do redis.call('ZADD', KEYS[1], unpack(scores, s, math.min(s + 999, #scores))) end
for _, i in ipairs(new) do add_event(base, bound, 'enqueued', ARGV[i], '0', 'state', 'pending') end
-- the wake marker (SPEC §9.3), the last write: a worker blocked in BZPOPMIN on it claims now
if seen % 2 == 0 then wake(base) end
return replies
