-- What DRAIN and PURGE share (docs/spec.md §11.4): the deletion of a batch of a set's members.

-- delete_jobs(set, base, ids, gone) -> how many left `set`: every id in `ids` (members of `set`)
-- leaves it; one whose row's state is `gone` is deleted with its row and, when the queue's events
-- are on, told `removed`; a ghost or a row in another state only leaves the set. Every row, and the
-- switch, is read before the first write.
local function delete_jobs(set, base, ids, gone)
  local rows, told = {}, {}
  for _, id in ipairs(ids) do
    local row = base .. 'job:' .. id
    local seen = redis.call('HMGET', row, 'attempts', 'state')
    if seen[2] == gone then
      rows[#rows + 1] = row
      told[#told + 1] = {id, seen[1] or '0'}
    end
  end
  local bound, refused = event_switch(base)
  if refused then return refused end
  -- unpack in slices: Lua's stack takes a few thousand values at most, limit goes to 10000
  for i = 1, #ids, 1000 do redis.call('ZREM', set, unpack(ids, i, math.min(i + 999, #ids))) end
  for _, row in ipairs(rows) do redis.call('DEL', row) end
  for _, job in ipairs(told) do add_event(base, bound, 'removed', job[1], job[2], 'state', gone) end
  return #ids
end
