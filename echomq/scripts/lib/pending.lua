-- A job's place in a pending set (SPEC §1): its score is its row's `priority`, 0 when the row has
-- none, wherever it enters one (flat pending, a flow's flow:pending, a lane's order).

-- the score of a job whose row's `priority` is `priority` (false or nil when it has none)
local function pending_score(priority)
  return tonumber(priority or '0')
end

-- the job `id` (its row `row`) into the pending set `set` at its score, its priority read
local function to_pending(set, row, id)
  redis.call('ZADD', set, pending_score(redis.call('HGET', row, 'priority')), id)
end
