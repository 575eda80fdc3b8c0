-- A unique window (docs/spec.md §14): a job enqueued with `unique` ms is not admitted again for that
-- long after COMPLETE or PUBLISH finished it, while the marker `unique:<id>` they write lives.

-- unique_marker(base, id, window) -> the marker to write, for a row whose `unique` is `window`; nil
-- for a row without one; or nil and the refusal of a window that is not an integer or a marker key
-- of another type. A read: the caller makes it before its first write.
local function unique_marker(base, id, window)
  if not window then return nil end
  if not string.match(window, '^%d+$') then return nil, redis.error_reply('EMQ hash value is not an integer') end
  local marker = base .. 'unique:' .. id
  local mtype = redis.call('TYPE', marker)['ok']
  if mtype ~= 'none' and mtype ~= 'hash' then
    return nil, redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
  end
  return marker
end

-- the window opens: the marker records when the job finished, and expires `window` ms after
local function open_window(marker, window)
  local finished = now_ms()
  redis.call('HSET', marker, 'finished', finished)
  redis.call('PEXPIREAT', marker, finished + tonumber(window))
end

-- within_window(base, id) -> the admission's answer while the id's window is open (its marker
-- exists): `unique`; or the refusal of a marker key of another type; nil when it may be admitted
local function within_window(base, id)
  local mtype = redis.call('TYPE', base .. 'unique:' .. id)['ok']
  if mtype == 'hash' then return 'unique' end
  if mtype ~= 'none' then return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value') end
end
