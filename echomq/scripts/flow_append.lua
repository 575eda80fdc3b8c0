-- EMQ flow_append (both wires). KEYS: flow:active, base. ARGV: id, token, progress.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/failure.lua, lib/flow.lua, lib/append.lua.
-- APPEND for a flow job (docs/spec.md §16.2): its lease checked in flow:active,
-- then its progress written and told as APPEND's is. Reply: 1; 0 when no row or the token does not
-- match; EMQSTATE when the row is not active or not in flow:active.
local refused = progress_refused(ARGV[3])
if refused then return refused end
local row = KEYS[2] .. 'job:' .. ARGV[1]
local held, answer = fence(row, ARGV[1], ARGV[2], KEYS[1], 'flow:active')
if not held then return answer end
return write_progress(KEYS[2], row, ARGV[1], ARGV[2], ARGV[3])
