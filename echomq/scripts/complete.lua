-- EMQ complete (wire 4). KEYS: active, base. ARGV: id, token.
-- Completion deletes the row and counts the job. A matching token on a row that is not
-- active, or not in active, is refused as the native verb refuses it (SPEC §9.1).
local row = KEYS[2] .. 'job:' .. ARGV[1]
local held = redis.call('HMGET', row, 'attempts', 'state')
if held[1] ~= ARGV[2] then return 0 end
if held[2] ~= 'active' then
  return redis.error_reply('EMQSTATE EMQ.COMPLETE row ' .. (held[2] and 'is ' .. held[2] or 'has no state') .. ', not active')
end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return redis.error_reply('EMQSTATE EMQ.COMPLETE id is not in active') end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', row)
redis.call('HINCRBY', KEYS[2] .. 'metrics:completed', 'count', 1)
return 1
