-- EMQ append (wire 4). KEYS: active, base. ARGV: id, token, progress. After lib/append.lua.
-- A held job's progress, fenced by its token as EXTEND is: `progress` written to the row and,
-- when `meta events` is on, the `progress` event appended (docs/spec.md §12). Another token
-- or no row answers 0 and writes nothing.
local refused = progress_refused(ARGV[3])
if refused then return refused end
local row = KEYS[2] .. 'job:' .. ARGV[1]
local held = redis.call('HMGET', row, 'attempts', 'state')
if held[1] ~= ARGV[2] then return 0 end
if held[2] ~= 'active' then
  return redis.error_reply('EMQSTATE EMQ.APPEND row ' .. (held[2] and 'is ' .. held[2] or 'has no state') .. ', not active')
end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return redis.error_reply('EMQSTATE EMQ.APPEND id is not in active') end
return write_progress(KEYS[2], row, ARGV[1], ARGV[2], ARGV[3])
