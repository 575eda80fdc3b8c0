-- EMQ flow_complete (both wires). KEYS: flow:active, base. ARGV: id, token, result, retention_ms.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/done.lua, lib/failure.lua, lib/flow.lua.
-- PUBLISH for a flow job: flow:active -> (deleted), counted, the completed record kept retention_ms
-- (0: none; PUBLISH's layout and checks, lib/done.lua), `completed` on its outcome channel; a parent's children's results go
-- with it (its flow is over). A child's result is told to its parent (lib/flow.lua), when the
-- parent's record confirms the link; an unconfirmed `parent` is no link (docs/spec.md §15 "Links").
-- Reply: 1; 0 when no row or the token does not match; EMQSTATE when the row is not active in flow:active.
-- Events when on: `completed`, then, its parent's last child, the parent's `promoted` (or a death's).
local base, id = KEYS[2], ARGV[1]
local row = base .. 'job:' .. id
local held, answer = fence(row, id, ARGV[2], KEYS[1], 'flow:active', 'created', 'started')
if not held then return answer end
-- the job's own queue's switches first (its events and `meta results`, one read), then the chain's
local bound, results, refused = record_switches(base)
if refused then return refused end
flow_bounds[base] = bound or false
refused = flow_switches(row)
if refused then return refused end
local retention = tonumber(ARGV[4])
local fields = retention > 0 and done_fields(results)
refused = done_refused(base, fields)
if refused then return refused end
local now = now_ms()
redis.call('ZREM', KEYS[1], id)
redis.call('DEL', row, base .. 'flow:results:' .. id, base .. 'flow:failures:' .. id, base .. 'flow:children:' .. id)
redis.call('HINCRBY', base .. 'metrics:completed', 'count', 1)
flow_event(base, 'completed', id, ARGV[2])
if retention > 0 then keep_done(base, fields, id, ARGV[2], ARGV[3], retention, held[3], held[4], now) end
if flow_links[row] then flow_tell(flow_links[row], row, true, ARGV[3], now) end
tell_outcome(base, id, 'completed')
return 1
