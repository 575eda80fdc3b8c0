-- EMQ publishes (wire 4). KEYS: active, base. ARGV: retention_ms, id1, token1, result1, ...
-- idk, tokenk, resultk.
-- PUBLISH for each (id, token, result) triple, in order, in one step, each kept retention_ms
-- (docs/spec.md §19). Every triple is checked before the first write; then the jobs held leave
-- active in one ZREM, their rows go in one DEL and the count grows by their number in one HINCRBY,
-- and each keeps its record and tells what its PUBLISH tells. Reply: one answer per triple,
-- PUBLISH's: 1, 0 (no row, another token, or an id completed earlier in the batch), or the refusal
-- of that job (an error element: nothing written for it).
local base = KEYS[2]
local retention = tonumber(ARGV[1])
-- the held jobs, in order: id, token, result, row read, marker
local ids, tokens, results, helds, markers, rows = {}, {}, {}, {}, {}, {}
local replies, completed = {}, {}
for i = 2, #ARGV, 3 do
  local id, token = ARGV[i], ARGV[i + 1]
  if completed[id] then
    replies[#replies + 1] = 0  -- no row is left once its earlier triple completes
  else
    local row = base .. 'job:' .. id
    local held, answer = fence('EMQ.PUBLISHES', row, id, token, KEYS[1], 'active', 'created', 'started', 'unique')
    local marker
    if held then marker, answer = unique_marker(base, id, held[5]) end
    if held and not answer then
      local j = #ids + 1
      ids[j], tokens[j], results[j], helds[j], markers[j], rows[j] = id, token, ARGV[i + 2], held, marker, row
      completed[id] = true
      answer = 1
    end
    replies[#replies + 1] = answer
  end
end
if #ids == 0 then return replies end
local bound, refused = event_switch(base)
if refused then return refused end
redis.call('ZREM', KEYS[1], unpack(ids))
redis.call('DEL', unpack(rows))
redis.call('HINCRBY', base .. 'metrics:completed', 'count', #ids)
local now
if retention > 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- what each completed job keeps and tells, as publish.lua: its record, its event, its outcome, its
-- window
for j = 1, #ids do
  local held = helds[j]
  if now then keep_done(base, ids[j], tokens[j], results[j], retention, held[3], held[4], now) end
  add_event(base, bound, 'completed', ids[j], tokens[j])
  tell_outcome(base, ids[j], 'completed')
  if markers[j] then open_window(markers[j], held[5]) end
end
return replies
