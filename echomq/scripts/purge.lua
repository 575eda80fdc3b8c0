-- EMQ purge (wire 4). KEYS: dead, base. ARGV: age_ms, limit.
-- Deletes up to limit dead jobs that died at least age_ms ago (the dead score is the time a
-- job died), oldest first. Every row is read before the first write; a member whose row is
-- dead is deleted with its row, a ghost or a row whose state is not dead only leaves dead.
-- Reply: how many members left dead.
local t = redis.call('TIME')
local before = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', before, 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then return 0 end
local rows = {}
for _, id in ipairs(ids) do
  local row = KEYS[2] .. 'job:' .. id
  if redis.call('HGET', row, 'state') == 'dead' then rows[#rows + 1] = row end
end
-- unpack in slices: Lua's stack takes a few thousand values at most, limit goes to 10000
for i = 1, #ids, 1000 do redis.call('ZREM', KEYS[1], unpack(ids, i, math.min(i + 999, #ids))) end
for _, row in ipairs(rows) do redis.call('DEL', row) end
return #ids
