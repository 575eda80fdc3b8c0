-- CLAIM's and CLAIMS' shared reading of the queue's meta (docs/spec.md §12, §13, §17): the client
-- puts this file before claim.lua's and claims.lua's own text.
-- switches(meta) -> bound, limit, window: the event switch (an integer MAXLEN; nil when absent or
-- <= 0) and the rate limit (`limit` starts in any `window` ms; nil when absent or <= 0); or, for
-- a refused read or a malformed value, nil, nil, nil and the error reply. Meta must exist.
local function switches(meta)
  local m = redis.pcall('HMGET', meta, 'events', 'rate_limit', 'rate_window')
  if m.err then return nil, nil, nil, m end
  local bound, limit, window = m[1], m[2], m[3]
  if bound then
    if not string.match(bound, '^%-?%d+$') then
      return nil, nil, nil, redis.error_reply('EMQ hash value is not an integer')
    end
    bound = tonumber(bound)
    if bound <= 0 then bound = nil end
  end
  if limit then
    if not string.match(limit, '^%-?%d+$') then
      return nil, nil, nil, redis.error_reply('EMQ hash value is not an integer')
    end
    limit = tonumber(limit)
    if limit <= 0 then
      return bound, nil, nil
    end
    if window and not string.match(window, '^%-?%d+$') then
      return nil, nil, nil, redis.error_reply('EMQ hash value is not an integer')
    end
    window = tonumber(window)
    if limit > 10000 or not window or window < 1 or window > 86400000 then
      return nil, nil, nil, redis.error_reply('EMQ rate limit must be 1 to 10000 starts per rate_window of 1 to 86400000 ms')
    end
    return bound, limit, window
  end
  return bound, nil, nil
end
