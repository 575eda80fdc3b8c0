-- EMQ append (wire 4). KEYS: active, base. ARGV: id, token, progress.
-- A held job's progress, fenced by its token as EXTEND is: `progress` written to the row and,
-- when `meta events` is on, the `progress` event appended (docs/spec.md §12). Another token
-- or no row answers 0 and writes nothing.
local base = KEYS[2]
local id = ARGV[1]
if string.len(ARGV[3]) > 65536 then
  return redis.error_reply('EMQARG progress must be at most 65536 bytes, got ' .. string.len(ARGV[3]))
end
local row = base .. 'job:' .. id
local held = redis.call('HMGET', row, 'attempts', 'state')
if held[1] ~= ARGV[2] then return 0 end
if held[2] ~= 'active' then
  return redis.error_reply('EMQSTATE EMQ.APPEND row ' .. (held[2] and 'is ' .. held[2] or 'has no state') .. ', not active')
end
if not redis.call('ZSCORE', KEYS[1], id) then return redis.error_reply('EMQSTATE EMQ.APPEND id is not in active') end
local bound = redis.call('HGET', base .. 'meta', 'events')
if bound then
  if not string.match(bound, '^%-?%d+$') then return redis.error_reply('EMQ hash value is not an integer') end
  bound = tonumber(bound)
  if bound <= 0 then bound = nil end
end
redis.call('HSET', row, 'progress', ARGV[3])
if bound then
  redis.call('XADD', base .. 'events', 'MAXLEN', bound, '*', 'type', 'progress', 'id', id, 'attempt', ARGV[2],
    'progress', ARGV[3])
end
return 1
