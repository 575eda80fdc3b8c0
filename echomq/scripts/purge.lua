-- EMQ purge (wire 4). KEYS: dead, base. ARGV: age_ms, limit.
-- Deletes up to limit dead jobs that died at least age_ms ago (the dead score is the time a
-- job died), oldest first. Every row is read before the first write; a member whose row is
-- dead is deleted with its row, a ghost or a row whose state is not dead only leaves dead.
-- When events are on, a `removed` event per deleted row.
-- Reply: how many members left dead.
local t = redis.call('TIME')
local before = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', before, 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then return 0 end
local gone = 'dead' -- the state of the rows this verb deletes (and tells removed)
local rows, told = {}, {}
for _, id in ipairs(ids) do
  local row = KEYS[2] .. 'job:' .. id
  local seen = redis.call('HMGET', row, 'attempts', 'state')
  if seen[2] == gone then
    rows[#rows + 1] = row
    told[#told + 1] = {id, seen[1] or '0'}
  end
end
local bound, refused = event_switch(KEYS[2])
if refused then return refused end
-- unpack in slices: Lua's stack takes a few thousand values at most, limit goes to 10000
for i = 1, #ids, 1000 do redis.call('ZREM', KEYS[1], unpack(ids, i, math.min(i + 999, #ids))) end
for _, row in ipairs(rows) do redis.call('DEL', row) end
for _, job in ipairs(told) do add_event(KEYS[2], bound, 'removed', job[1], job[2], 'state', gone) end
return #ids
