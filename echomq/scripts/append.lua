-- EMQ append (wire 4). KEYS: active, base. ARGV: id, token, progress.
-- Loaded after lib/events.lua, lib/held.lua, lib/append.lua.
-- A held job's progress, fenced by its token as EXTEND is: `progress` written to the row and,
-- when `meta events` is on, the `progress` event appended (docs/spec.md §12). Another token
-- or no row answers 0 and writes nothing.
local refused = progress_refused(ARGV[3])
if refused then return refused end
local row = KEYS[2] .. 'job:' .. ARGV[1]
local held, answer = fence(row, ARGV[1], ARGV[2], KEYS[1], 'active')
if not held then return answer end
return write_progress(KEYS[2], row, ARGV[1], ARGV[2], ARGV[3])
