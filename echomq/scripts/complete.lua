-- EMQ complete (wire 4). KEYS: active, base. ARGV: id, token.
-- Completion deletes the row and counts the job, and tells `completed` on the job's outcome
-- channel while the queue has result waiters. A matching token on a row that is not active, or
-- not in active, is refused as the native verb refuses it (SPEC §9.1).
local row = KEYS[2] .. 'job:' .. ARGV[1]
local held = redis.call('HMGET', row, 'attempts', 'unique', 'state')
if held[1] ~= ARGV[2] then return 0 end
local refused = state_refused('EMQ.COMPLETE', held[3], 'active')
if refused then return refused end
-- the queue's event switch, and whether a result waiter follows the queue (`waiters` present and
-- not 0), read with it
local switches = redis.call('HMGET', KEYS[2] .. 'meta', 'events', 'waiters')
local waited = switches[2] and switches[2] ~= '0'
local bound, refused = event_bound(switches[1])
if refused then return refused end
-- a unique window (docs/spec.md §14): the id is not admitted again for `unique` ms from now
local marker, refused = unique_marker(KEYS[2], ARGV[1], held[2])
if refused then return refused end
-- the first write, and the last check: not in active, nothing is written
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return redis.error_reply('EMQSTATE EMQ.COMPLETE id is not in active')
end
redis.call('DEL', row)
redis.call('HINCRBY', KEYS[2] .. 'metrics:completed', 'count', 1)
add_event(KEYS[2], bound, 'completed', ARGV[1], ARGV[2])
-- the outcome, told to result waiters where the caller may publish (they find no record)
if waited then tell_outcome(KEYS[2], ARGV[1], 'completed') end
if marker then open_window(marker, held[2]) end
return 1
