-- EMQ lane_complete (both wires). KEYS: lanes:active, base. ARGV: id, token, result, retention_ms.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/unique.lua, lib/done.lua, lib/lanes.lua.
-- As publish (docs/spec.md §12): the row deleted and counted, the completed record (the result,
-- attempts, created, started, finished; publish's layout and checks, lib/done.lua) kept
-- retention_ms from now (0 keeps none),
-- `completed` told on the job's outcome channel; then the group's slot is freed. A row with
-- `unique` (lane_enqueue_unique) opens its window, as COMPLETE does. The `completed` event when on.
lanes(KEYS[2])
local id = ARGV[1]
local row, g = held_row(id, ARGV[2])
if not row then return g end
local bound, results, refused = record_switches(base)
if refused then return refused end
local times = redis.call('HMGET', row, 'created', 'started', 'unique')
local marker
marker, refused = unique_marker(base, id, times[3])
if refused then return refused end
local retention = tonumber(ARGV[4])
local fields = retention > 0 and done_fields(results)
refused = done_refused(base, fields)
if refused then return refused end
redis.call('ZREM', KEYS[1], id)
redis.call('DEL', row)
redis.call('HINCRBY', base .. 'metrics:completed', 'count', 1)
add_event(base, bound, 'completed', id, ARGV[2])
if retention > 0 then keep_done(base, fields, id, ARGV[2], ARGV[3], retention, times[1], times[2], now_ms()) end
if marker then open_window(marker, times[3]) end
tell_outcome(base, id, 'completed')
free(g)
return 1
