-- The checks a verb makes on a job's row before its first write (SPEC §9.1, docs/spec.md §4): the
-- holder's fence (its token is the row's attempts, the row is active, its id in the active set),
-- and the state and set a verb from outside expects. Each refusal is EMQSTATE and names the verb
-- (VERB: the loader gives every script its verb's label, docs/spec.md §4).

-- the refusal of a row whose state (false when it has none) is not `want` (the text names the
-- states it may be in, where that is more than one); nil when it is
local function state_refused(state, want)
  if state ~= want then
    return redis.error_reply('EMQSTATE ' .. VERB .. ' row ' .. (state and 'is ' .. state or 'has no state')
      .. ', not ' .. want)
  end
end

-- the refusal of an id that is not in `set` (named `name` in the text); nil when it is
local function set_refused(set, name, id)
  if not redis.call('ZSCORE', set, id) then
    return redis.error_reply('EMQSTATE ' .. VERB .. ' id is not in ' .. name)
  end
end

-- the refusal of a lane row (it has a `group`) or a flow child (a `parent`), which only their own
-- scripts move; nil for a flat row
local function foreign_refused(group, parent)
  if group then return redis.error_reply('EMQSTATE lane row is not native') end
  if parent then return redis.error_reply('EMQSTATE flow child is not native') end
end

-- in_active(active, ids, spots, replies, again) -> of the jobs a batch holds (`ids`, in order, each
-- answering at replies[spots[j]]), the indexes of those in `active`, in order, from one ZMSCORE for
-- all (COMPLETES' and PUBLISHES' last check). One that is not answers the refusal at its place,
-- and so does each later pair of its id that presented the same token (`again`: {spot, index}).
local function in_active(active, ids, spots, replies, again)
  local scores = redis.call('ZMSCORE', active, unpack(ids))
  local kept, outside = {}, {}
  for j = 1, #ids do
    if scores[j] then
      kept[#kept + 1] = j
    else
      outside[j] = redis.error_reply('EMQSTATE ' .. VERB .. ' id is not in active')
      replies[spots[j]] = outside[j]
    end
  end
  for _, twin in ipairs(again) do
    if outside[twin[2]] then replies[twin[1]] = outside[twin[2]] end
  end
  return kept
end

-- fence(row, id, token, active, name, ...) -> the row's attempts, state and `...` fields (one
-- HMGET's reply) when the caller holds the job: `token` is its attempts, its state is active and
-- `id` is in `active` (named `name`); else nil and the reply: 0 for no row or another token, or
-- the refusal
local function fence(row, id, token, active, name, ...)
  local held = redis.call('HMGET', row, 'attempts', 'state', ...)
  if held[1] ~= token then return nil, 0 end
  local refused = state_refused(held[2], 'active') or set_refused(active, name, id)
  if refused then return nil, refused end
  return held
end

-- renew(active, deadline, base, first, epoch) -> one reply per (id, token) pair of ARGV from `first`
-- (EXTENDS and its lane and flow twins): `deadline`, the lease's new score in `active`, where the
-- caller holds it (its token is the row's attempts, the row active, its id in `active`), the row
-- stamped with `epoch()` when `epoch` is given (read before the write); else 0
local function renew(active, deadline, base, first, epoch)
  local replies = {}
  for i = first, #ARGV, 2 do
    local id = ARGV[i]
    local row = base .. 'job:' .. id
    local held = redis.call('HMGET', row, 'attempts', 'state')
    if held[1] == ARGV[i + 1] and held[2] == 'active' and redis.call('ZSCORE', active, id) then
      local stamp = epoch and epoch()
      redis.call('ZADD', active, deadline, id)
      if stamp then redis.call('HSET', row, 'lease_epoch', stamp) end
      replies[#replies + 1] = deadline
    else
      replies[#replies + 1] = 0
    end
  end
  return replies
end
