-- What COMPLETE and COMPLETES share (docs/spec.md §3, §14, §18): a job's checks before its
-- completion. The client puts this file (after lib/held.lua and lib/unique.lua) before
-- complete.lua's and completes.lua's own text. Each caller then reads the queue's switches, removes
-- the ids from active, deletes the rows, counts them and tells what each tells itself (COMPLETES:
-- one command each for the whole batch).

-- completable(base, id, token) -> when the caller holds the job (its token is the row's
-- attempts and its state `active`): the row's attempts, `unique` and state (one HMGET's reply) and
-- the marker its window writes (nil without one); else nil and the reply: 0 for no row or another
-- token, or the refusal of its state or its window. Reads only: whether the id is in active is the
-- caller's check.
local function completable(base, id, token)
  local held = redis.call('HMGET', base .. 'job:' .. id, 'attempts', 'unique', 'state')
  if held[1] ~= token then return nil, 0 end
  local refused = state_refused(held[3], 'active')
  if refused then return nil, refused end
  local marker
  marker, refused = unique_marker(base, id, held[2])
  if refused then return nil, refused end
  return held, marker
end
