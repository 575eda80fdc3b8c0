-- EMQ flow_release (both wires). KEYS: flow:active, flow:pending, base. ARGV: id, token.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/failure.lua, lib/flow.lua.
-- REQUEUE for a flow job (a stopping worker lets go of what it holds): flow:active -> flow:pending,
-- no counter written. Reply: 1; 0 when no row or the token does not match; EMQSTATE when the row
-- is not active in flow:active. The `requeued` event when on.
local base, id = KEYS[3], ARGV[1]
local row = base .. 'job:' .. id
local held, answer = fence(row, id, ARGV[2], KEYS[1], 'flow:active', 'priority')
if not held then return answer end
local refused = flow_switch(base)
if refused then return refused end
redis.call('ZREM', KEYS[1], id)
redis.call('ZADD', KEYS[2], pending_score(held[3]), id)
redis.call('HSET', row, 'state', 'pending')
flow_event(base, 'requeued', id, ARGV[2], 'state', 'pending')
wake(base)
return 1
