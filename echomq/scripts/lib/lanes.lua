-- Lanes (docs/lanes-and-flows.md): the helpers every lane script shares; a lane script is loaded
-- after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua and this file, and its first
-- line is lanes(<its base KEY>). Every key a lane script touches derives from the queue's
-- base, so all of them share its hashtag.
local base, ready, held, running

local function lanes(queue_base)
  base = queue_base
  ready, held, running = base .. 'lanes:ready', base .. 'lanes:held', base .. 'lanes:running'
end

-- A group's own settings (its pause in lanes:paused, its k in lanes:limit) are kept while it has no
-- jobs: a pause set ahead of a group's jobs must hold when they come. So they are bounded by count
-- instead (a queue name's bytes each, and GROUP_SETTINGS_MAX groups per key, LIMIT_MAX).
local GROUP_SETTINGS_MAX, GROUP_MAX_LEN = 10000, 128

-- the refusal of a setting for g in lanes:paused or lanes:limit (`name`) when g is no group name (1
-- to GROUP_MAX_LEN bytes), or when g has no entry there yet (`has`) and it already holds `count` =
-- GROUP_SETTINGS_MAX (`free`: how to make room); nil when it may be written
local function setting_refused(name, g, has, count, free)
  if string.len(g) < 1 or string.len(g) > GROUP_MAX_LEN then
    return redis.error_reply('EMQARG group must be 1 to ' .. GROUP_MAX_LEN .. ' bytes, got ' .. string.len(g))
  end
  if not has and count >= GROUP_SETTINGS_MAX then
    return redis.error_reply('EMQSTATE ' .. VERB .. ' ' .. name .. ' holds ' .. count .. ' groups, the most it keeps: '
      .. free)
  end
end

-- how many jobs of g may run at once: the group's own k, else the queue's, else 1
local function lane_limit(g)
  local k = redis.call('HGET', base .. 'lanes:limit', g) or redis.call('HGET', base .. 'meta', 'lane_limit')
  return tonumber(k or '1')
end

-- g takes a turn at the back of the round when it may start a job now; true when it joined
local function offer(g)
  if redis.call('ZSCORE', ready, g) or redis.call('ZSCORE', held, g) then return false end
  if redis.call('SISMEMBER', base .. 'lanes:paused', g) == 1 then return false end
  if redis.call('ZCARD', base .. 'lane:' .. g) == 0 then return false end
  if tonumber(redis.call('HGET', running, g) or '0') >= lane_limit(g) then return false end
  redis.call('ZADD', ready, redis.call('INCR', base .. 'lanes:seq'), g)
  return true
end

-- a group with nothing waiting and nothing running is forgotten
local function tidy(g)
  if redis.call('HEXISTS', running, g) == 0 and redis.call('ZCARD', base .. 'lane:' .. g) == 0 then
    redis.call('SREM', base .. 'lanes:groups', g)
  end
end

-- one job of g no longer runs: its slot is free, the group may take its turn again
local function free(g)
  if redis.call('HINCRBY', running, g, -1) <= 0 then redis.call('HDEL', running, g) end
  if offer(g) then wake(base) end
  tidy(g)
end

-- a job's score in its lane: lower priority first, then the enqueue order. A score is a double,
-- exact to 2^53: the priority (0..=1023) takes the top 10 bits, `seq` the other 43 (8.8e12 draws).
-- Formatted here: Lua would print a number this large with 14 digits only.
local function lane_score(priority, seq)
  return string.format('%.0f', pending_score(priority) * 8796093022208 + tonumber(seq or '0'))
end

-- a new lane job: its row (`unique` kept when given: lane_complete opens the window), its place in
-- its group's lane, the group known and offered a turn; the `enqueued` event when on (`bound`)
local function join_lane(id, payload, g, priority, unique, bound)
  local seq = redis.call('INCR', base .. 'lanes:seq')
  local fields = {'state', 'pending', 'payload', payload, 'attempts', '0', 'created', now_ms(), 'group', g, 'seq', seq}
  if priority ~= '0' then
    fields[#fields + 1], fields[#fields + 2] = 'priority', priority
  end
  if unique then
    fields[#fields + 1], fields[#fields + 2] = 'unique', unique
  end
  redis.call('HSET', base .. 'job:' .. id, unpack(fields))
  redis.call('ZADD', base .. 'lane:' .. g, lane_score(priority, seq), id)
  redis.call('SADD', base .. 'lanes:groups', g)
  add_event(base, bound, 'enqueued', id, '0', 'state', 'pending')
  if offer(g) then wake(base) end
end

-- a job back at its place in its lane (its priority and enqueue order), waiting; its slot freed
local function back_in_lane(row, id, g, fields)
  local place = redis.call('HMGET', row, 'priority', 'seq')
  redis.call('ZADD', base .. 'lane:' .. g, lane_score(place[1], place[2]), id)
  redis.call('HSET', row, 'state', 'pending', unpack(fields))
  free(g)
end

-- g waits until `due` (a retry's backoff, a delay): out of the round until then
local function hold(g, due)
  redis.call('ZREM', ready, g)
  local at = redis.call('ZSCORE', held, g)
  if not at or tonumber(at) < due then redis.call('ZADD', held, due, g) end
end

-- the held groups whose time has come take their turn again
local function release_due(now)
  local woke = false
  for _, g in ipairs(redis.call('ZRANGEBYSCORE', held, '-inf', now, 'LIMIT', 0, 1000)) do
    redis.call('ZREM', held, g)
    woke = offer(g) or woke
  end
  if woke then wake(base) end
end

-- the refusal of a row that is not a lane row (it has no `group`), which the lane scripts leave to
-- the flat verbs
local function not_lane_row()
  return redis.error_reply('EMQSTATE ' .. VERB .. ' row is not a lane row')
end

-- the row of a job the caller holds, or the reply that refuses the settle (0: not held with
-- this token; EMQSTATE: held but not as a lane lease)
local function held_row(id, token)
  local row = base .. 'job:' .. id
  local f = redis.call('HMGET', row, 'attempts', 'state', 'group')
  if f[1] ~= token then return nil, 0 end
  if not f[3] then return nil, not_lane_row() end
  local refused = state_refused(f[2], 'active') or set_refused(base .. 'lanes:active', 'lanes:active', id)
  if refused then return nil, refused end
  return row, f[3]
end
