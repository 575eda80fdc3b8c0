-- EMQ lane_enqueue (both wires). KEYS: base. ARGV: id, payload, group, lane_priority.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/lanes.lua.
-- Idempotent as enqueue: an id that already has a row is not enqueued twice. The job waits in
-- its group's lane by its priority (0..=1023, lower first), then its enqueue order (`seq`); the
-- group takes a turn when it may start one. The row keeps `priority` only when not 0, as a flat
-- row does. The `enqueued` event when on.
lanes(KEYS[1])
local id, g = ARGV[1], ARGV[3]
local row = base .. 'job:' .. id
if redis.call('EXISTS', row) == 1 then return 0 end
local bound, refused = event_switch(base)
if refused then return refused end
join_lane(id, ARGV[2], g, ARGV[4], nil, bound)
return 1
