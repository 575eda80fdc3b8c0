-- EMQ flow_delay (both wires). KEYS: flow:active, flow:schedule, base. ARGV: id, token, delay_ms.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/failure.lua, lib/flow.lua.
-- DELAY for a flow job: flow:active -> flow:schedule at now + delay_ms, no budget spent (failures
-- and last_error stay as they were); flow_claim moves it back to flow:pending when it is due.
-- Reply: the due time (ms); 0 when no row or the token does not match; EMQSTATE when the row is
-- not active in flow:active. The `delayed` event when on.
local base, id = KEYS[3], ARGV[1]
local row = base .. 'job:' .. id
local held, answer = fence(row, id, ARGV[2], KEYS[1], 'flow:active')
if not held then return answer end
local refused = flow_switch(base)
if refused then return refused end
local due = now_ms() + tonumber(ARGV[3])
redis.call('ZREM', KEYS[1], id)
redis.call('ZADD', KEYS[2], due, id)
redis.call('HSET', row, 'state', 'scheduled')
flow_event(base, 'delayed', id, ARGV[2], 'state', 'scheduled')
return due
