-- EMQ lane_cancel (both wires). KEYS: lanes:active, dead, base. ARGV: id.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/lanes.lua.
-- CANCEL's twin for a lane row: its lease is revoked from outside. It goes dead (scored now)
-- with last_error `cancelled` and is counted, and its group's slot is freed; its holder's next
-- renewal answers 0 and its settle is refused. No row answers 0; a row that is not a lane row,
-- not active or not in lanes:active is refused before any write. The `dead` event when on.
lanes(KEYS[3])
local id = ARGV[1]
local row = base .. 'job:' .. id
if redis.call('EXISTS', row) == 0 then return 0 end
local seen = redis.call('HMGET', row, 'group', 'attempts', 'state')
local g = seen[1]
if not g then return not_lane_row() end
local refused = state_refused(seen[3], 'active')
  or set_refused(KEYS[1], 'lanes:active', id)
if refused then return refused end
local bound, refused = event_switch(base)
if refused then return refused end
local now = now_ms()
redis.call('ZREM', KEYS[1], id)
redis.call('ZADD', KEYS[2], now, id)
redis.call('HSET', row, 'state', 'dead', 'last_error', 'cancelled', 'failed', now)
redis.call('HINCRBY', base .. 'metrics:failed', 'count', 1)
add_event(base, bound, 'dead', id, seen[2] or '0', 'error', 'cancelled', 'state', 'dead')
tell_outcome(base, id, 'dead')
free(g)
return 1
