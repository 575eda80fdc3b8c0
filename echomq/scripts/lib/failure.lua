-- What a failure keeps (docs/spec.md §11.6): the bounds on its `error` (last_error) and its
-- traceback, the native grammar's (trafikey's ERROR_MAX_LEN, TRACEBACK_MAX_LEN). FAIL, FAILURES.INCR
-- and their lane and flow twins refuse a longer one before any write; the client cuts its own. And
-- FAIL's move, which FAILURES.INCR makes too (as trafikey's fail.rs runs both).
local ERROR_MAX, TRACEBACK_MAX = 4096, 8192

-- failure_refused(error, traceback) -> the refusal of an error over ERROR_MAX bytes or a traceback
-- (nil: none given) over TRACEBACK_MAX, as the native verbs word it; else nil
local function failure_refused(error, traceback)
  if string.len(error) > ERROR_MAX then
    return redis.error_reply('EMQARG error must be at most ' .. ERROR_MAX .. ' bytes, got ' .. string.len(error))
  end
  if traceback and string.len(traceback) > TRACEBACK_MAX then
    return redis.error_reply('EMQARG traceback must be at most ' .. TRACEBACK_MAX .. ' bytes, got '
      .. string.len(traceback))
  end
end

-- an error the server composes (a flow parent's `child <id> failed: <its error>`, which grows with
-- each level it climbs) within ERROR_MAX bytes: its head, cut at a character boundary, then `...`
local function bounded_error(text)
  if string.len(text) <= ERROR_MAX then return text end
  local keep = ERROR_MAX - 3
  while keep > 0 and string.byte(text, keep + 1) >= 0x80 and string.byte(text, keep + 1) < 0xC0 do
    keep = keep - 1  -- the first byte cut continues a character: cut before that character
  end
  return string.sub(text, 1, keep) .. '...'
end

-- fail_job(always) -> FAIL's reply, for fail.lua and failures_incr.lua (KEYS: active, pending,
-- schedule, dead, base; ARGV: id, token, error, max_attempts, backoff_ms, traceback (optional)).
-- One budget on both wires (SPEC §9.1): failures' = failures + 1, dead when failures' >=
-- max_attempts. Every outcome records the error, the time and, when given, the traceback. A
-- matching token on a row that is not active (a repeated terminal failure included), or not in
-- active, is refused before any write, as are the bounds on the error and the traceback (first,
-- as the native verb's). The `failed` event, then `retried` or `dead`, when on; the wake marker
-- when the job is claimable now or due before the schedule's head; a death told on the job's
-- outcome channel where the caller may publish: `always` (FAILURES.INCR), else while the queue
-- has result waiters (FAIL).
local function fail_job(always)
  local base, id, token, error = KEYS[5], ARGV[1], ARGV[2], ARGV[3]
  local refused = failure_refused(error, ARGV[6])
  if refused then return refused end
  local row = base .. 'job:' .. id
  local held, answer = fence(row, id, token, KEYS[1], 'active')
  if not held then return answer end
  local bound, waited
  bound, waited, refused = told_switches(base)
  if refused then return refused end
  -- the first write: a failures field HINCRBY refuses stops the script before any other
  local failures = redis.call('HINCRBY', row, 'failures', 1)
  redis.call('ZREM', KEYS[1], id)
  local now = now_ms()
  local state, claimable
  if failures >= tonumber(ARGV[4]) then
    state = 'dead'
    redis.call('ZADD', KEYS[4], now, id)  -- the dead score is the time it died (purge by age)
  elseif tonumber(ARGV[5]) == 0 then
    state, claimable = 'pending', true
    to_pending(KEYS[2], row, id)
  else
    state = 'scheduled'
    claimable = schedule_due(KEYS[3], id, now + tonumber(ARGV[5]))
  end
  local failure = {'state', state, 'last_error', error, 'failed', now}
  if ARGV[6] then failure[7], failure[8] = 'traceback', ARGV[6] end
  redis.call('HSET', row, unpack(failure))
  if state == 'dead' then redis.call('HINCRBY', base .. 'metrics:failed', 'count', 1) end
  add_event(base, bound, 'failed', id, token, 'error', error)
  add_event(base, bound, state == 'dead' and 'dead' or 'retried', id, token, 'state', state)
  if claimable then wake(base) end
  if state == 'dead' and (always or waited) then tell_outcome(base, id, 'dead') end
  return state
end
