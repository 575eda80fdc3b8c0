-- EMQ drain (wire 4). KEYS: pending, base. ARGV: limit.
-- Loaded after lib/events.lua, lib/delete.lua.
-- Deletes up to limit jobs from the head of pending (the order ZPOPMIN serves). Every row is
-- read before the first write; a member whose row is pending is deleted with its row, a
-- ghost or a row whose state is not pending only leaves pending. When events are on, a
-- `removed` event per deleted row.
-- Reply: how many left pending. The deletion is lib/delete.lua's, PURGE's too.
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #ids == 0 then return 0 end
return delete_jobs(KEYS[1], KEYS[2], ids, 'pending')
