-- EMQ completes (wire 4). KEYS: active, base. ARGV: id1, token1, ... idk, tokenk.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/unique.lua, lib/complete.lua.
-- COMPLETE for each (id, token) pair, in order, in one step (docs/spec.md §18). Every pair is checked
-- before the first write; then the jobs held leave active in one ZREM, their rows go in one DEL and
-- the count grows by their number in one HINCRBY, and each tells what its COMPLETE tells. Reply: one
-- answer per pair, COMPLETE's: 1, 0 (no row, another token, or an id completed earlier in the
-- batch), or the refusal of that job (an error element: nothing written for it).
local base = KEYS[2]
-- the held jobs, in order: id, token, row read, marker, and where each answers in the reply
local ids, tokens, helds, markers, spots = {}, {}, {}, {}, {}
local replies, at, again = {}, {}, {}
for i = 1, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local spot, first = #replies + 1, at[id]
  if first then
    -- an id met again after its pair was held: 0 (no row is left once that pair completes), or,
    -- presenting the same token, that pair's refusal if it is refused (set below)
    replies[spot] = 0
    if token == tokens[first] then again[#again + 1] = {spot, first} end
  else
    local held, answer = completable(base, id, token)
    if held then
      local j = #ids + 1
      ids[j], tokens[j], helds[j], markers[j], spots[j] = id, token, held, answer, spot
      at[id] = j
      replies[spot] = 1
    else
      replies[spot] = answer
    end
  end
end
if #ids == 0 then return replies end
-- which held jobs are in active: one read for all, the last check
local kept = in_active(KEYS[1], ids, spots, replies, again)
if #kept == 0 then return replies end
-- the queue's event switch and result waiters, read once for the batch
local bound, waited, refused = told_switches(base)
if refused then return refused end
local gone, rows = {}, {}
for n, j in ipairs(kept) do gone[n], rows[n] = ids[j], base .. 'job:' .. ids[j] end
redis.call('ZREM', KEYS[1], unpack(gone))
redis.call('DEL', unpack(rows))
redis.call('HINCRBY', base .. 'metrics:completed', 'count', #kept)
-- what each completed job tells, as complete.lua: its event, its outcome, its window
for _, j in ipairs(kept) do
  add_event(base, bound, 'completed', ids[j], tokens[j])
  if waited then tell_outcome(base, ids[j], 'completed') end
  if markers[j] then open_window(markers[j], helds[j][2]) end
end
return replies
