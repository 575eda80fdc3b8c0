-- The flow library (docs/lanes-and-flows.md "Flows"): every flow_*.lua script is loaded after it
-- (and after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua and lib/failure.lua), so
-- the moves that tell a parent its child's outcome are written once.
-- A flow job lives in its queue's flow sets (flow:pending, flow:active, flow:schedule, flow:waiting),
-- never in the flat ones, so no native verb moves it; a dead one joins the queue's dead set.

-- a row key's queue base and id: emq:{q}:job:<id> -> emq:{q}:, <id>
local function flow_split(row)
  return string.match(row, '^(emq:{[^{}]+}:)job:(.+)$')
end

-- A parent's record of its children, `flow:children:<id>` in its own queue: the row keys of the
-- children that have not told it yet (flow_enqueue writes it, flow_tell takes each child out). A
-- child's `parent` field is data its own queue's writers control; the record is written only by
-- those who may write the parent's queue, so a link counts only when the record confirms it
-- (docs/spec.md §15 "Links"): a forged `parent` never reaches another queue.
local function flow_record(parent)
  local base, id = flow_split(parent)
  return base .. 'flow:children:' .. id
end

-- The links followed in this step, read before the first write: row -> its parent's row key when
-- that parent's record lists the row, else false (no parent, not a row key, or not listed: the
-- link is treated as absent).
local flow_links = {}

-- Whether `parent`'s record confirms `row` as its child. A parent with no record at all in the
-- row's own queue is a flow enqueued before records existed (0.1.0's checkouts): whoever wrote the
-- row's `parent` could write that parent too, so following it crosses no fence. Across queues only
-- a record counts (`emq adopt-flows` writes one for such a flow): docs/spec.md §15 "Links".
local function flow_confirms(parent, row)
  local record = flow_record(parent)
  if redis.call('SISMEMBER', record, row) == 1 then return true end
  return flow_split(parent) == flow_split(row) and redis.call('EXISTS', record) == 0
end

-- flow_link(row) -> the parent `row` may tell, or false (see flow_links); a read
local function flow_link(row)
  if flow_links[row] == nil then
    local parent = redis.call('HGET', row, 'parent')
    flow_links[row] = parent and flow_split(parent) and flow_confirms(parent, row) and parent or false
  end
  return flow_links[row]
end

-- Events (docs/spec.md §12): a move is told in the moved job's own queue, when that queue's switch
-- is on. A script reads the switch of every queue its moves may tell before its first write
-- (flow_switch, flow_switches), so a malformed one refuses the whole step; flow_bounds keeps what
-- was read, by base: the stream's bound, or false when off.
local flow_bounds = {}

-- the switch of `base` into flow_bounds: the refusal of a value that is not an integer, else nil
local function flow_switch(base)
  if flow_bounds[base] ~= nil then return nil end
  local bound, refused = event_switch(base)
  if refused then return refused end
  flow_bounds[base] = bound or false
end

-- the switches of `row`'s queue and of each queue up its chain of confirmed links (a death, or a
-- last child's completion, is told to each in turn), each link checked on the way (flow_link): the
-- first refusal, else nil. A chain that comes back to a row it passed ends there.
local function flow_switches(row)
  local walked = {}
  while row and not walked[row] do
    walked[row] = true
    local refused = flow_switch((flow_split(row)))
    if refused then return refused end
    row = flow_link(row)
  end
end

-- flow_event(base, kind, id, attempt, ...): one event of a flow job in its queue (`base`), with the
-- switch flow_switch read for it (add_event's arguments after the bound)
local function flow_event(base, ...)
  add_event(base, flow_bounds[base], ...)
end

local flow_tell -- a parent that dies tells its own parent: the two call each other

-- A flow job dies (its retry budget spent, stalled past max_stalled, or a child failed under
-- `fail`): into the dead set, its children's results and record dropped (its flow is over), its
-- parent told once, when the link is confirmed (flow_link, read by flow_switches before the first
-- write). Its row keeps `flow_parent` for the record and loses `parent`: a dead row is a flat one,
-- so REPROCESS may run it again alone.
local function flow_die(base, id, error, now)
  local row = base .. 'job:' .. id
  redis.call('ZADD', base .. 'dead', now, id)
  redis.call('HSET', row, 'state', 'dead', 'last_error', error, 'failed', now)
  redis.call('HINCRBY', base .. 'metrics:failed', 'count', 1)
  redis.call('DEL', base .. 'flow:results:' .. id, base .. 'flow:failures:' .. id, base .. 'flow:children:' .. id)
  local f = redis.call('HMGET', row, 'parent', 'attempts')
  flow_event(base, 'dead', id, f[2] or '0', 'error', error, 'state', 'dead')
  if f[1] then
    redis.call('HDEL', row, 'parent')
    redis.call('HSET', row, 'flow_parent', f[1])
    if flow_links[row] then flow_tell(flow_links[row], row, false, error, now) end
  end
  tell_outcome(base, id, 'dead')
end

-- Tell a waiting parent one child's outcome: completed (ok, with its result) or dead (its error).
-- `child` is the child's row key, confirmed by the parent's record (flow_link), and leaves it: a
-- child tells once. A dead child under `fail` kills the parent; under `continue` its error is kept
-- for the parent; under `ignore` it counts as done. The last child moves the parent flow:waiting
-- -> flow:pending.
flow_tell = function(parent, child, ok, value, now)
  local base, id = flow_split(parent)
  local _, child_id = flow_split(child)
  redis.call('SREM', flow_record(parent), child)
  local held = redis.call('HMGET', parent, 'on_child_failure', 'priority', 'attempts', 'state')
  if held[4] ~= 'waiting' then return end -- failed already (or gone): its flow is over
  local policy = held[1] or 'fail'
  if not ok and policy == 'fail' then
    redis.call('ZREM', base .. 'flow:waiting', id)
    flow_die(base, id, bounded_error('child ' .. child_id .. ' failed: ' .. value), now)
    return
  end
  if ok then
    redis.call('HSET', base .. 'flow:results:' .. id, child_id, value)
  elseif policy == 'continue' then
    redis.call('HSET', base .. 'flow:failures:' .. id, child_id, value)
  end
  if redis.call('HINCRBY', parent, 'children', -1) <= 0 then
    redis.call('ZREM', base .. 'flow:waiting', id)
    redis.call('ZADD', base .. 'flow:pending', pending_score(held[2]), id)
    redis.call('HSET', parent, 'state', 'pending')
    flow_event(base, 'promoted', id, held[3] or '0', 'state', 'pending')
    wake(base)  -- a flow job of the queue is claimable (a wire-6 worker polls its flow sets)
  end
end
