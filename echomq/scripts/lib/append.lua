-- What APPEND, lane_append and flow_append share (docs/spec.md §12, §16.2): the bound on a progress
-- value, and the progress written to the row and told as a `progress` event when the queue's events
-- are on. Each checks its holder's lease itself, where the lease is held. The client puts this file
-- before each one's own text (after lib/events.lua, and its family's library for the lane and flow ones).

-- a progress value over 64 KiB: the refusal; else nil
local function progress_refused(progress)
  if string.len(progress) > 65536 then
    return redis.error_reply('EMQARG progress must be at most 65536 bytes, got ' .. string.len(progress))
  end
end

-- `progress` on the held job's row, then its event when `meta events` is on (read first: a malformed
-- switch refuses before any write); answers 1
local function write_progress(base, row, id, token, progress)
  local bound, refused = event_switch(base)
  if refused then return refused end
  redis.call('HSET', row, 'progress', progress)
  add_event(base, bound, 'progress', id, token, 'progress', progress)
  return 1
end
