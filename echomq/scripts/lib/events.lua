-- What a queue tells (docs/spec.md §12): its events (the switch `meta events`, and one event in its
-- stream `events`) and a job's outcome. A script reads the switch before its first write, so a
-- malformed one refuses the step.

-- The most entries a stream keeps, and the most bytes of each event's value (its error, progress,
-- state): the stream is bounded by entries times an entry's size (trafikey's EVENTS_MAX and
-- EVENT_VALUE_MAX_LEN).
local EVENTS_MAX, EVENT_VALUE_MAX = 100000, 1024

-- event_bound(value) -> the switch as read (`meta events`; false or nil when absent): the stream's
-- bound (MAXLEN, at most EVENTS_MAX: a larger one is read as that), nil when off (absent or <= 0);
-- or nil and the refusal of a value that is not an integer
local function event_bound(value)
  if not value then return nil end
  if not string.match(value, '^%-?%d+$') then return nil, redis.error_reply('EMQ hash value is not an integer') end
  value = tonumber(value)
  if value > 0 then return math.min(value, EVENTS_MAX) end
end

-- event_switch(base) -> the switch of the queue at `base`, read, as event_bound
local function event_switch(base)
  return event_bound(redis.call('HGET', base .. 'meta', 'events'))
end

-- told_switches(base) -> the event switch of the queue at `base` (as event_bound) and whether a
-- result waiter follows it (`meta waiters` present and not 0), from one read of meta; or nil,
-- nil and the refusal of a malformed switch. What COMPLETE, COMPLETES and FAIL read before they
-- tell an outcome.
local function told_switches(base)
  local meta = redis.call('HMGET', base .. 'meta', 'events', 'waiters')
  local bound, refused = event_bound(meta[1])
  if refused then return nil, nil, refused end
  return bound, meta[2] and meta[2] ~= '0'
end

-- record_switches(base) -> the event switch of the queue at `base` (as event_bound) and its `meta
-- results` as read (false when absent: the layout of its completed records, lib/done.lua's
-- done_fields), from one read of meta, and the refusal of a malformed event switch (nil when it
-- is well formed). The layout comes with a refusal too: PUBLISHES checks its records' key before it
-- refuses the batch for its event switch, as the native verb does (each triple's checks first).
-- What PUBLISH, PUBLISHES, lane_complete and flow_complete read before they keep a record.
local function record_switches(base)
  local meta = redis.call('HMGET', base .. 'meta', 'events', 'results')
  local bound, refused = event_bound(meta[1])
  return bound, meta[2], refused
end

-- one event in the queue's stream when its switch is on (`bound`): type, id, attempt, then the
-- event's own fields (name, value, ...), each value cut to its first EVENT_VALUE_MAX bytes (the
-- row keeps it whole)
local function add_event(base, bound, kind, id, attempt, ...)
  if bound then
    local fields = {...}
    for i = 2, #fields, 2 do
      if string.len(fields[i]) > EVENT_VALUE_MAX then fields[i] = string.sub(fields[i], 1, EVENT_VALUE_MAX) end
    end
    redis.call('XADD', base .. 'events', 'MAXLEN', bound, '*', 'type', kind, 'id', id, 'attempt', attempt,
      unpack(fields))
  end
end

-- wire 4's wake marker (SPEC §9.3): a job of the queue at `base` became claimable, or is due before
-- the schedule's head did; a worker blocked on the marker (BZPOPMIN) takes it and looks. A script
-- writes it last.
local function wake(base)
  redis.call('ZADD', base .. 'wake', 0, 'w')
end

-- a job's outcome (`completed`, `dead`) on its channel `outcome:<id>`, told where the caller may
-- publish: a result waiter's wake-up, not state, so an ACL without the channel tells nothing
local function tell_outcome(base, id, outcome)
  local channel = base .. 'outcome:' .. id
  if redis.acl_check_cmd('SPUBLISH', channel, outcome) then redis.call('SPUBLISH', channel, outcome) end
end
