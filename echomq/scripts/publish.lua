-- EMQ publish (wire 4). KEYS: active, base. ARGV: id, token, result, retention_ms.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/unique.lua, lib/done.lua.
-- COMPLETE's move and checks, then, in the same step: the completed record (the result,
-- attempts, created, started, finished) expiring retention_ms from now (0 keeps none), the
-- job's field of `done` or, on a node without field expiry or under `meta results record`, the
-- key `done:<id>` (lib/done.lua), the `completed` event when `meta events` is on, and
-- `completed` on the job's outcome channel where the caller may publish (docs/spec.md §12).
-- The event switch and `meta results` are one read; `done` must be a hash or nothing when the
-- record is its field (WRONGTYPE, before the first write).
local base = KEYS[2]
local id = ARGV[1]
local row = base .. 'job:' .. id
local held, answer = fence(row, id, ARGV[2], KEYS[1], 'active', 'created', 'started', 'unique')
if not held then return answer end
local bound, results, refused = record_switches(base)
if refused then return refused end
-- a unique window (docs/spec.md §14): the id is not admitted again for `unique` ms from now
local marker, refused = unique_marker(base, id, held[5])
if refused then return refused end
local retention = tonumber(ARGV[4])
local fields = retention > 0 and done_fields(results)
refused = done_refused(base, fields)
if refused then return refused end
redis.call('ZREM', KEYS[1], id)
redis.call('DEL', row)
redis.call('HINCRBY', base .. 'metrics:completed', 'count', 1)
if retention > 0 then keep_done(base, fields, id, ARGV[2], ARGV[3], retention, held[3], held[4], now_ms()) end
add_event(base, bound, 'completed', id, ARGV[2])
tell_outcome(base, id, 'completed')
if marker then open_window(marker, held[5]) end
return 1
