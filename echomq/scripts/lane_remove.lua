-- EMQ lane_remove (both wires). KEYS: dead, base. ARGV: id.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/lanes.lua.
-- REMOVE's twin for a lane row: a job waiting in its group's lane, or dead, is deleted, the row
-- and its set membership together; a group left with nothing waiting or running is forgotten.
-- No row answers 0; a row that is not a lane row, an active one (cancel it), and a row missing
-- from the set its state names are refused before any write. Reply: the state removed from. The
-- `removed` event when on.
lanes(KEYS[2])
local id = ARGV[1]
local row = base .. 'job:' .. id
if redis.call('EXISTS', row) == 0 then return 0 end
local seen = redis.call('HMGET', row, 'group', 'attempts', 'state')
local g, state = seen[1], seen[3]
if not g then return not_lane_row() end
if state == 'active' then return redis.error_reply('EMQSTATE ' .. VERB .. ' row is active: cancel it instead') end
local set = ({pending = base .. 'lane:' .. g, dead = KEYS[1]})[state or '']
if not set then
  return redis.error_reply('EMQSTATE ' .. VERB .. ' row ' .. (state and 'is ' .. state or 'has no state')
    .. ', not pending or dead')
end
local refused = set_refused(set, state == 'pending' and 'lane:' .. g or 'dead', id)
if refused then return refused end
local bound, refused = event_switch(base)
if refused then return refused end
redis.call('ZREM', set, id)
redis.call('DEL', row)
if state == 'pending' then
  if redis.call('ZCARD', set) == 0 then redis.call('ZREM', ready, g) end  -- no turn for an empty lane
  tidy(g)
end
add_event(base, bound, 'removed', id, seen[2] or '0', 'state', state)
return state
