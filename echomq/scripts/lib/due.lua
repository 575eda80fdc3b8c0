-- A job put off to a due time (docs/spec.md §10): the schedule's head is a blocked wire-4 worker's
-- timeout, so a job due before it wakes the worker to recompute it.

-- schedule_due(schedule, id, due) -> true when `id`, put in `schedule` at `due`, falls due before
-- the schedule's head did (or the schedule was empty): the caller writes the wake marker
local function schedule_due(schedule, id, due)
  local head = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
  redis.call('ZADD', schedule, due, id)
  return head[2] == nil or due < tonumber(head[2])
end
