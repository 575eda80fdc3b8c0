-- EMQ purge (wire 4). KEYS: dead, base. ARGV: age_ms, limit.
-- Loaded after lib/clock.lua, lib/events.lua, lib/delete.lua.
-- Deletes up to limit dead jobs that died at least age_ms ago (the dead score is the time a
-- job died), oldest first. Every row is read before the first write; a member whose row is
-- dead is deleted with its row, a ghost or a row whose state is not dead only leaves dead.
-- When events are on, a `removed` event per deleted row.
-- Reply: how many members left dead. The deletion is lib/delete.lua's, DRAIN's too.
local before = now_ms() - tonumber(ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', before, 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then return 0 end
return delete_jobs(KEYS[1], KEYS[2], ids, 'dead')
