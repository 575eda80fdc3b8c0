-- EMQ complete (wire 4). KEYS: active, base. ARGV: id, token. After lib/complete.lua.
-- Completion deletes the row and counts the job, and tells `completed` on the job's outcome
-- channel while the queue has result waiters. A matching token on a row that is not active, or
-- not in active, is refused as the native verb refuses it (SPEC §9.1).
local base = KEYS[2]
local held, marker = completable('EMQ.COMPLETE', base, ARGV[1], ARGV[2])
if not held then return marker end
local bound, waited, refused = settle_switches(base)
if refused then return refused end
-- the first write, and the last check: not in active, nothing is written
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return redis.error_reply('EMQSTATE EMQ.COMPLETE id is not in active')
end
redis.call('DEL', base .. 'job:' .. ARGV[1])
redis.call('HINCRBY', base .. 'metrics:completed', 'count', 1)
completed(base, bound, waited, ARGV[1], ARGV[2], held, marker)
return 1
