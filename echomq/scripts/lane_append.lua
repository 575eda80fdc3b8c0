-- EMQ lane_append (both wires). KEYS: base. ARGV: id, token, progress.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/lanes.lua, lib/append.lua.
-- APPEND for a lane job (docs/spec.md §16.2): its lease checked as lane_complete
-- checks it, then its progress written and told as APPEND's is. Reply: 1; 0 when no row or the
-- token does not match; EMQSTATE when the row is not a lane row, not active or not in lanes:active.
lanes(KEYS[1])
local refused = progress_refused(ARGV[3])
if refused then return refused end
local row, answer = held_row(ARGV[1], ARGV[2])
if not row then return answer end
return write_progress(base, row, ARGV[1], ARGV[2], ARGV[3])
