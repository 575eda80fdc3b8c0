-- EMQ lane_resume (both wires). KEYS: base. ARGV: group.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/lanes.lua.
-- The group takes its turn again (a waiting worker is woken). Reply: 1 when it was paused.
lanes(KEYS[1])
local was = redis.call('SREM', base .. 'lanes:paused', ARGV[1])
if offer(ARGV[1]) then wake(base) end
return was
