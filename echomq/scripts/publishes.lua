-- EMQ publishes (wire 4). KEYS: active, base. ARGV: retention_ms, id1, token1, result1, ...
-- idk, tokenk, resultk.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/unique.lua, lib/done.lua.
-- PUBLISH for each (id, token, result) triple, in order, in one step, each kept retention_ms
-- (docs/spec.md §19). Every triple is checked before the first write (whether the held jobs are in
-- active, in one read for all; then the event switch and `meta results`, in one read, and, when
-- the records are fields of `done`, its type: a `done` of another type refuses every held job);
-- then the jobs held leave active in one ZREM, their rows (and, under the `done:<id>` layout, any
-- older record of theirs) go in one DEL and the count grows by their number in one HINCRBY, their
-- records are kept (as fields: one HSETEX for all, lib/done.lua), and each tells what its PUBLISH
-- tells. Reply: one answer per triple, PUBLISH's: 1, 0 (no row, another token, or an id completed
-- earlier in the batch), or the refusal of that job (an error element: nothing written for it).
local base = KEYS[2]
local retention = tonumber(ARGV[1])
-- the held jobs, in order: id, token, result, row read, marker, and where each answers in the reply
local ids, tokens, results, helds, markers, spots = {}, {}, {}, {}, {}, {}
local replies, at, again = {}, {}, {}
for i = 2, #ARGV, 3 do
  local id, token = ARGV[i], ARGV[i + 1]
  local spot, first = #replies + 1, at[id]
  replies[spot] = 0
  if first then
    -- an id met again after its triple was held: 0 (no row is left once that triple completes),
    -- or, presenting the same token, that triple's refusal if it is refused (set below)
    if token == tokens[first] then again[#again + 1] = {spot, first} end
  else
    local held = redis.call('HMGET', base .. 'job:' .. id, 'attempts', 'state', 'created', 'started', 'unique')
    if held[1] == token then
      local marker
      local refused = state_refused(held[2], 'active')
      if not refused then marker, refused = unique_marker(base, id, held[5]) end
      if refused then
        replies[spot] = refused
      else
        local j = #ids + 1
        ids[j], tokens[j], results[j], helds[j], markers[j], spots[j] = id, token, ARGV[i + 2], held, marker, spot
        at[id] = j
        replies[spot] = 1
      end
    end
  end
end
if #ids == 0 then return replies end
-- which held jobs are in active: one read for all, the last check
local kept = in_active(KEYS[1], ids, spots, replies, again)
if #kept == 0 then return replies end
-- the batch's switches; its records' key is checked before a malformed event switch refuses the
-- whole batch (the native verb checks each triple's record before the queue's switches)
local bound, layout, events_refused = record_switches(base)
local fields = retention > 0 and done_fields(layout)
local refused = done_refused(base, fields)
if refused then
  -- `done` is the one key every held job's record would be written to: each is refused, and so is
  -- each later triple of its id with the same token (as in_active's refusals)
  local refuses = {}
  for _, j in ipairs(kept) do replies[spots[j]], refuses[j] = refused, true end
  for _, twin in ipairs(again) do
    if refuses[twin[2]] then replies[twin[1]] = refused end
  end
  return replies
end
if events_refused then return events_refused end
-- the ids, and the keys to delete: the rows, and the records to be written anew (an older one of
-- the same id goes whole)
local done_ids, keys = {}, {}
for n, j in ipairs(kept) do
  done_ids[n] = ids[j]
  keys[#keys + 1] = base .. 'job:' .. ids[j]
  if retention > 0 and not fields then keys[#keys + 1] = base .. 'done:' .. ids[j] end
end
redis.call('ZREM', KEYS[1], unpack(done_ids))
redis.call('DEL', unpack(keys))
redis.call('HINCRBY', base .. 'metrics:completed', 'count', #kept)
local now = retention > 0 and now_ms()
if fields then
  -- every record in one HSETEX: the batch shares its deadline
  local records = {}
  for _, j in ipairs(kept) do
    local held = helds[j]
    records[#records + 1] = ids[j]
    records[#records + 1] = packed_record(tokens[j], now, held[3], held[4], results[j])
  end
  keep_fields(base, records, retention, now)
end
-- what each completed job keeps and tells, as publish.lua: its record (under `done:<id>`), its
-- event, its outcome, its window
for _, j in ipairs(kept) do
  local held = helds[j]
  if now and not fields then write_done(base, ids[j], tokens[j], results[j], retention, held[3], held[4], now) end
  add_event(base, bound, 'completed', ids[j], tokens[j])
  tell_outcome(base, ids[j], 'completed')
  if markers[j] then open_window(markers[j], held[5]) end
end
return replies
