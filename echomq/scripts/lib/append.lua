-- What APPEND, lane_append and flow_append share (docs/spec.md §12, §16.2): the bound on a progress
-- value, and the progress written to the row and told as a `progress` event when the queue's events
-- are on. Each checks its holder's lease itself, where the lease is held. The client puts this file
-- before each one's own text (after its family's prelude, for the lane and flow ones).

-- a progress value over 64 KiB: the refusal; else nil
local function progress_refused(progress)
  if string.len(progress) > 65536 then
    return redis.error_reply('EMQARG progress must be at most 65536 bytes, got ' .. string.len(progress))
  end
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
