-- The flow library (docs/lanes-and-flows.md "Flows"): the client puts it before every flow_*.lua
-- script's own text, so the moves that tell a parent its child's outcome are written once.
-- A flow job lives in its queue's flow sets (flow:pending, flow:active, flow:schedule, flow:waiting),
-- never in the flat ones, so no native verb moves it; a dead one joins the queue's dead set.

local function flow_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- the server's run_id: the epoch a flow lease is stamped with (the restart exemption, as STALLED.CHECK's)
local function flow_epoch()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
end

-- a row key's queue base and id: emq:{q}:job:<id> -> emq:{q}:, <id>
local function flow_split(row)
  return string.match(row, '^(emq:{[^{}]+}:)job:(.+)$')
end

-- a flow job of the queue became claimable: the wake marker, for a wire-4 worker blocked on it
-- (a wire-6 worker blocks in BCLAIM on the flat sets, and polls its flow sets instead)
local function flow_wake(base)
  redis.call('ZADD', base .. 'wake', 0, 'w')
end

local flow_tell -- a parent that dies tells its own parent: the two call each other

-- A flow job dies (its retry budget spent, stalled past max_stalled, or a child failed under
-- `fail`): into the dead set, its children's results dropped (its flow is over), its parent told
-- once. Its row keeps `flow_parent` for the record and loses `parent`: a dead row is a flat one,
-- so REPROCESS may run it again alone.
local function flow_die(base, id, error, now)
  local row = base .. 'job:' .. id
  redis.call('ZADD', base .. 'dead', now, id)
  redis.call('HSET', row, 'state', 'dead', 'last_error', error, 'failed', now)
  redis.call('HINCRBY', base .. 'metrics:failed', 'count', 1)
  redis.call('DEL', base .. 'flow:results:' .. id, base .. 'flow:failures:' .. id)
  local parent = redis.call('HGET', row, 'parent')
  if parent then
    redis.call('HDEL', row, 'parent')
    redis.call('HSET', row, 'flow_parent', parent)
    flow_tell(parent, id, false, error, now)
  end
  local channel = base .. 'outcome:' .. id
  if redis.acl_check_cmd('SPUBLISH', channel, 'dead') then redis.call('SPUBLISH', channel, 'dead') end
end

-- Tell a waiting parent one child's outcome: completed (ok, with its result) or dead (its error).
-- A dead child under `fail` kills the parent; under `continue` its error is kept for the parent;
-- under `ignore` it counts as done. The last child moves the parent flow:waiting -> flow:pending.
flow_tell = function(parent, child, ok, value, now)
  local base, id = flow_split(parent)
  local held = redis.call('HMGET', parent, 'on_child_failure', 'priority', 'state')
  if held[3] ~= 'waiting' then return end -- failed already (or gone): its flow is over
  local policy = held[1] or 'fail'
  if not ok and policy == 'fail' then
    redis.call('ZREM', base .. 'flow:waiting', id)
    flow_die(base, id, 'child ' .. child .. ' failed: ' .. value, now)
    return
  end
  if ok then
    redis.call('HSET', base .. 'flow:results:' .. id, child, value)
  elseif policy == 'continue' then
    redis.call('HSET', base .. 'flow:failures:' .. id, child, value)
  end
  if redis.call('HINCRBY', parent, 'children', -1) <= 0 then
    redis.call('ZREM', base .. 'flow:waiting', id)
    redis.call('ZADD', base .. 'flow:pending', tonumber(held[2] or '0'), id)
    redis.call('HSET', parent, 'state', 'pending')
    flow_wake(base)
  end
end

