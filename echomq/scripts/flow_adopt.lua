-- EMQ flow_adopt (both wires): an admin's step after an upgrade (`emq adopt-flows`), never a worker's.
-- A flow parent enqueued before parents kept a record of their children (docs/spec.md §15
-- "Links") gets that record, naming the children given, each proven its child first.
-- KEYS: base. ARGV: id, child1, ... childk.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/failure.lua, lib/flow.lua.
-- (the parent's queue; the parent's id, then each child's row key, emq:{q}:job:<id>)
-- Every check before the one write, each refused with EMQSTATE EMQ.FLOW.ADOPT ...: the parent waits
-- (state waiting, in flow:waiting) with no record yet; it waits for exactly the k children given,
-- each once; each names this parent, is live in the flow set of its state, and was admitted in
-- the parent's own step (the same `created`: flow_enqueue writes one time for a whole flow).
-- Reply: k, the children the record now lists.
local parent_id = ARGV[1]
local parent = KEYS[1] .. 'job:' .. parent_id
local function refused(why)
  return redis.error_reply('EMQSTATE ' .. VERB .. ' ' .. why .. ': nothing written')
end
local held = redis.call('HMGET', parent, 'children', 'created', 'state')
if held[3] ~= 'waiting' or not redis.call('ZSCORE', KEYS[1] .. 'flow:waiting', parent_id) then
  return refused(parent .. ' is not a waiting flow parent')
end
local record = flow_record(parent)
if redis.call('EXISTS', record) == 1 then return refused(parent .. ' has its record already') end
if tonumber(held[1]) ~= #ARGV - 1 then
  return refused(parent .. ' waits for ' .. tostring(held[1]) .. ' children, ' .. (#ARGV - 1) .. ' given')
end
local live = {pending = 'flow:pending', active = 'flow:active', scheduled = 'flow:schedule', waiting = 'flow:waiting'}
local seen = {}
for i = 2, #ARGV do
  local child = ARGV[i]
  local base, id = flow_split(child)
  if not base then return refused(child .. ' is not a row key') end
  if seen[child] then return refused(child .. ' is given twice') end
  seen[child] = true
  local f = redis.call('HMGET', child, 'parent', 'created', 'state')
  if f[1] ~= parent then return refused(child .. ' does not name ' .. parent .. ' as its parent') end
  if not live[f[3]] or not redis.call('ZSCORE', base .. live[f[3]], id) then
    return refused(child .. ' is not waiting to run or running')
  end
  if f[2] ~= held[2] then return refused(child .. ' was not admitted with its parent') end
end
for i = 2, #ARGV, 1000 do -- unpack's stack holds a few thousand values at most
  redis.call('SADD', record, unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
return #ARGV - 1
