-- What COMPLETE and COMPLETES share (docs/spec.md §3, §12, §14, §18): a job's checks before its
-- completion, the queue's switches read once for all, and what one completed job tells. The client
-- puts this file (after lib/events.lua, lib/held.lua and lib/unique.lua) before complete.lua's and
-- completes.lua's own text. Each caller removes the ids from active, deletes the rows and counts
-- them itself (COMPLETES: one command each for the whole batch).

-- completable(verb, base, id, token) -> when the caller holds the job (its token is the row's
-- attempts and its state `active`): the row's attempts, `unique` and state (one HMGET's reply) and
-- the marker its window writes (nil without one); else nil and the reply: 0 for no row or another
-- token, or the refusal of its state or its window. Reads only: whether the id is in active is the
-- caller's check.
local function completable(verb, base, id, token)
  local held = redis.call('HMGET', base .. 'job:' .. id, 'attempts', 'unique', 'state')
  if held[1] ~= token then return nil, 0 end
  local refused = state_refused(verb, held[3], 'active')
  if refused then return nil, refused end
  local marker
  marker, refused = unique_marker(base, id, held[2])
  if refused then return nil, refused end
  return held, marker
end

-- settle_switches(base) -> the queue's event switch (as event_bound) and whether a result waiter
-- follows it (`waiters` present and not 0), from one read of meta; or nil, nil and the refusal of a
-- malformed switch
local function settle_switches(base)
  local switches = redis.call('HMGET', base .. 'meta', 'events', 'waiters')
  local bound, refused = event_bound(switches[1])
  if refused then return nil, nil, refused end
  return bound, switches[2] and switches[2] ~= '0'
end

-- what a completed job tells, after its row is gone: its `completed` event when the switch is on,
-- the outcome to result waiters where the caller may publish (they find no record), and its window
local function completed(base, bound, waited, id, token, held, marker)
  add_event(base, bound, 'completed', id, token)
  if waited then tell_outcome(base, id, 'completed') end
  if marker then open_window(marker, held[2]) end
end
