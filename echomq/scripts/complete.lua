-- EMQ complete (wire 4). KEYS: active, base. ARGV: id, token. After lib/complete.lua.
-- Completion deletes the row and counts the job, and tells `completed` on the job's outcome
-- channel while the queue has result waiters. A matching token on a row that is not active, or
-- not in active, is refused as the native verb refuses it (SPEC §9.1).
local base = KEYS[2]
local held, marker = completable('EMQ.COMPLETE', base, ARGV[1], ARGV[2])
if not held then return marker end
-- the queue's event switch, and whether a result waiter follows the queue (`waiters` present and
-- not 0), read with it (written out here and in completes.lua: a function would cost every run a
-- closure, docs/spec.md §4)
local switches = redis.call('HMGET', base .. 'meta', 'events', 'waiters')
local waited = switches[2] and switches[2] ~= '0'
local bound, refused = event_bound(switches[1])
if refused then return refused end
-- the first write, and the last check: not in active, nothing is written
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return redis.error_reply('EMQSTATE EMQ.COMPLETE id is not in active')
end
redis.call('DEL', base .. 'job:' .. ARGV[1])
redis.call('HINCRBY', base .. 'metrics:completed', 'count', 1)
add_event(base, bound, 'completed', ARGV[1], ARGV[2])
-- the outcome, told to result waiters where the caller may publish (they find no record)
if waited then tell_outcome(base, ARGV[1], 'completed') end
if marker then open_window(marker, held[2]) end
return 1
