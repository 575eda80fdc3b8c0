-- EMQ remove (wire 4). KEYS: pending, schedule, dead, base. ARGV: id.
-- Loaded after lib/events.lua, lib/held.lua.
-- Deletes a waiting (pending, scheduled) or dead job: the row and its set membership go
-- together. No row answers 0; an active job is refused (cancel it); so are a lane row, a
-- flow child, and a row missing from the set its state names. Reply: the state removed from.
local row = KEYS[4] .. 'job:' .. ARGV[1]
if redis.call('EXISTS', row) == 0 then return 0 end
local seen = redis.call('HMGET', row, 'group', 'parent', 'state')
local state = seen[3]
local refused = foreign_refused(seen[1], seen[2])
if refused then return refused end
if state == 'active' then return redis.error_reply('EMQSTATE ' .. VERB .. ' row is active: cancel it instead') end
local set = ({pending = KEYS[1], scheduled = KEYS[2], dead = KEYS[3]})[state or '']
if not set then
  return redis.error_reply('EMQSTATE ' .. VERB .. ' row ' .. (state and 'is ' .. state or 'has no state')
    .. ', not pending, scheduled or dead')
end
refused = set_refused(set, state == 'scheduled' and 'schedule' or state, ARGV[1])
if refused then return refused end
local bound, refused = event_switch(KEYS[4])
if refused then return refused end
local attempt = redis.call('HGET', row, 'attempts') or '0'
redis.call('ZREM', set, ARGV[1])
redis.call('DEL', row)
add_event(KEYS[4], bound, 'removed', ARGV[1], attempt, 'state', state)
return state
