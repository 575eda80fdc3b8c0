-- EMQ flow_cancel (both wires). KEYS: base. ARGV: id.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/failure.lua, lib/flow.lua.
-- CANCEL for a flow job, whatever it waits for: from flow:active (its lease revoked: its holder's
-- next renewal answers 0, its settle is refused), flow:pending, flow:schedule or flow:waiting (a
-- parent), it dies with last_error `cancelled` and its parent is told, as a death by failures is
-- (lib/flow.lua: its on_child_failure decides). A flow job is never removed (its parent would
-- wait for it forever): cancelling one is how a flow is stopped. No row answers 0; a row that is
-- not a flow job, or is in none of the flow sets its state names, is refused before any write.
-- The `dead` event when on (and its parent's, when told to die).
local base, id = KEYS[1], ARGV[1]
local row = base .. 'job:' .. id
if redis.call('EXISTS', row) == 0 then return 0 end
local seen = redis.call('HMGET', row, 'parent', 'on_child_failure', 'state')
if not seen[1] and not seen[2] then return redis.error_reply('EMQSTATE ' .. VERB .. ' row is not a flow job') end
local state = seen[3]
local set = ({active = 'flow:active', pending = 'flow:pending', scheduled = 'flow:schedule',
  waiting = 'flow:waiting'})[state or '']
if not set then
  return redis.error_reply('EMQSTATE ' .. VERB .. ' row ' .. (state and 'is ' .. state or 'has no state')
    .. ', not active, pending, scheduled or waiting')
end
local refused = set_refused(base .. set, set, id) or flow_switches(row)
if refused then return refused end
redis.call('ZREM', base .. set, id)
flow_die(base, id, 'cancelled', now_ms())
return 1
