-- EMQ complete (wire 4). KEYS: active, base. ARGV: id, token.
-- Completion deletes the row and counts the job.
local row = KEYS[2] .. 'job:' .. ARGV[1]
if redis.call('HGET', row, 'attempts') ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', row)
redis.call('HINCRBY', KEYS[2] .. 'metrics:completed', 'count', 1)
return 1
