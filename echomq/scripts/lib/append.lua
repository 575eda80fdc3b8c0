-- What APPEND, lane_append and flow_append share (docs/spec.md §12, §16.2): the bound on a progress
-- value, the fence of a job held in an active set, and the progress written to the row and told as
-- a `progress` event when the queue's events are on. The client puts this file before each one's
-- own text (after its family's prelude, for the lane and flow ones).

-- a progress value over 64 KiB: the refusal; else nil
local function progress_refused(progress)
  if string.len(progress) > 65536 then
    return redis.error_reply('EMQARG progress must be at most 65536 bytes, got ' .. string.len(progress))
  end
end

-- the row of a job held with `token` and leased in `active` (`set` names it in a refusal); else nil
-- and the reply: 0 for no row or another token, EMQSTATE for a row not active or not in the set
local function held_in(verb, active, set, row, id, token)
  local held = redis.call('HMGET', row, 'attempts', 'state')
  if held[1] ~= token then return nil, 0 end
  if held[2] ~= 'active' then
    return nil, redis.error_reply('EMQSTATE ' .. verb .. ' row ' .. (held[2] and 'is ' .. held[2] or 'has no state') .. ', not active')
  end
  if not redis.call('ZSCORE', active, id) then
    return nil, redis.error_reply('EMQSTATE ' .. verb .. ' id is not in ' .. set)
  end
  return row
end

-- `progress` on the held job's row, then its event when `meta events` is on (read first: a malformed
-- switch refuses before any write); answers 1
local function write_progress(base, row, id, token, progress)
  local bound = redis.call('HGET', base .. 'meta', 'events')
  if bound then
    if not string.match(bound, '^%-?%d+$') then return redis.error_reply('EMQ hash value is not an integer') end
    bound = tonumber(bound)
    if bound <= 0 then bound = nil end
  end
  redis.call('HSET', row, 'progress', progress)
  if bound then
    redis.call('XADD', base .. 'events', 'MAXLEN', bound, '*', 'type', 'progress', 'id', id, 'attempt', token,
      'progress', progress)
  end
  return 1
end
