-- EMQ lane_enqueue_unique (both wires). KEYS: base. ARGV: id, payload, group, lane_priority,
-- unique_ms, replace.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/unique.lua, lib/lanes.lua.
-- ENQUEUE.UNIQUE's twin for a lane job (docs/spec.md §14), answering why: `created` (as
-- lane_enqueue, with `unique` kept on the row when unique_ms > 0, for lane_complete); `exists`
-- (the id has a row: one running or dead, or any without replace 1); `replaced` (replace 1 and a
-- lane job of this group waiting in its lane: its payload is the new one, its place kept);
-- `unique` (no row, but the id completed less than its unique window ago). A row of another
-- group, a flat row or a flow job is refused for replace, as is a waiting row out of its lane.
lanes(KEYS[1])
local id, g = ARGV[1], ARGV[3]
local row = base .. 'job:' .. id
local rtype = redis.call('TYPE', row)['ok']
if rtype ~= 'none' and rtype ~= 'hash' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
if rtype == 'hash' then
  if ARGV[6] ~= '1' then return 'exists' end
  local seen = redis.call('HMGET', row, 'group', 'state')
  if seen[1] ~= g then
    return redis.error_reply('EMQSTATE ' .. VERB .. ' row is not a lane row of group ' .. g)
  end
  if seen[2] ~= 'pending' then return 'exists' end
  local refused = set_refused(base .. 'lane:' .. g, 'lane:' .. g, id)
  if refused then return refused end
  redis.call('HSET', row, 'payload', ARGV[2])
  return 'replaced'
end
local shut = within_window(base, id)
if shut then return shut end
local bound, refused = event_switch(base)
if refused then return refused end
join_lane(id, ARGV[2], g, ARGV[4], ARGV[5] ~= '0' and ARGV[5] or nil, bound)
return 'created'
