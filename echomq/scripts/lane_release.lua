-- EMQ lane_release (both wires). KEYS: lanes:active, base. ARGV: id, token, delay_ms.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/lanes.lua.
-- The holder gives its job back, spending no budget: to its place at the head of its lane
-- (REQUEUE's twin); with a delay the group waits that long (DELAY's twin; order is kept).
-- The event when on: `requeued`, or `delayed` with a delay (state pending: back in its lane).
lanes(KEYS[2])
local row, g = held_row(ARGV[1], ARGV[2])
if not row then return g end
local bound, refused = event_switch(base)
if refused then return refused end
redis.call('ZREM', KEYS[1], ARGV[1])
local delay = tonumber(ARGV[3])
if delay > 0 then hold(g, now_ms() + delay) end
back_in_lane(row, ARGV[1], g, {})
add_event(base, bound, delay > 0 and 'delayed' or 'requeued', ARGV[1], ARGV[2], 'state', 'pending')
return 1
