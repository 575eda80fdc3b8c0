-- EMQ enqueue_unique (wire 4). KEYS: pending, schedule, base.
-- ARGV: id, payload, priority, unique_ms, replace, delay_ms (optional). replace is 0 or 1.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/due.lua, lib/unique.lua.
-- ENQUEUE (no delay_ms) or SCHEDULE (delay_ms) that answers why: `created`; `exists` (the id
-- has a row); `replaced` (replace 1 and the row is pending or scheduled: its payload, and its
-- due time when delay_ms is given, are the new ones); `unique` (no row, but the id completed
-- less than its unique window ago: the marker `unique:<id>` COMPLETE and PUBLISH write).
-- unique_ms > 0 is kept on the row (`unique`) for the verb that completes it.
local base = KEYS[3]
local id = ARGV[1]
local row = base .. 'job:' .. id
local delay = ARGV[6]
local rtype = redis.call('TYPE', row)['ok']
if rtype ~= 'none' and rtype ~= 'hash' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local now = now_ms()
if rtype == 'hash' then
  if ARGV[5] ~= '1' then return 'exists' end
  local seen = redis.call('HMGET', row, 'group', 'parent', 'state')
  local refused = foreign_refused(seen[1], seen[2])
  if refused then return refused end
  local state = seen[3]
  if state == 'active' or state == 'dead' then return 'exists' end
  if state ~= 'pending' and state ~= 'scheduled' then
    return redis.error_reply('EMQSTATE ' .. VERB .. ' row ' .. (state and 'is ' .. state .. ', not pending, scheduled, active or dead' or 'has no state'))
  end
  local set = state == 'pending' and KEYS[1] or KEYS[2]
  refused = set_refused(set, state == 'scheduled' and 'schedule' or state, id)
  if refused then return refused end
  if delay == nil then
    redis.call('HSET', row, 'payload', ARGV[2])
    return 'replaced'
  end
  local due = now + tonumber(delay)
  local first = schedule_due(KEYS[2], id, due)
  if state == 'pending' then redis.call('ZREM', KEYS[1], id) end
  redis.call('HSET', row, 'state', 'scheduled', 'payload', ARGV[2])
  if first then wake(base) end
  return 'replaced'
end
local shut = within_window(base, id)
if shut then return shut end
local bound, refused = event_switch(base)
if refused then return refused end
local state = delay == nil and 'pending' or 'scheduled'
local stype = redis.call('TYPE', state == 'pending' and KEYS[1] or KEYS[2])['ok']
if stype ~= 'none' and stype ~= 'zset' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local fields = {'state', state, 'payload', ARGV[2], 'attempts', '0', 'created', now}
if tonumber(ARGV[3]) > 0 then fields[#fields + 1] = 'priority'; fields[#fields + 1] = ARGV[3] end
if tonumber(ARGV[4]) > 0 then fields[#fields + 1] = 'unique'; fields[#fields + 1] = ARGV[4] end
redis.call('HSET', row, unpack(fields))
local claimable = true
if delay == nil then
  redis.call('ZADD', KEYS[1], tonumber(ARGV[3]), id)
else
  local due = now + tonumber(delay)
  claimable = schedule_due(KEYS[2], id, due)
end
add_event(base, bound, 'enqueued', id, '0', 'state', state)
-- the wake marker (SPEC §9.3), the last write
if claimable then wake(base) end
return 'created'
