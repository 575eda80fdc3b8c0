-- EMQ complete (wire 4). KEYS: active, base. ARGV: id, token.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/unique.lua, lib/complete.lua.
-- Completion deletes the row and counts the job, and tells `completed` on the job's outcome
-- channel while the queue has result waiters. A matching token on a row that is not active, or
-- not in active, is refused as the native verb refuses it (SPEC §9.1).
local base = KEYS[2]
local held, marker = completable(base, ARGV[1], ARGV[2])
if not held then return marker end
local bound, waited, refused = told_switches(base)
if refused then return refused end
-- the first write, and the last check: not in active, nothing is written
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return redis.error_reply('EMQSTATE ' .. VERB .. ' id is not in active')
end
redis.call('DEL', base .. 'job:' .. ARGV[1])
redis.call('HINCRBY', base .. 'metrics:completed', 'count', 1)
add_event(base, bound, 'completed', ARGV[1], ARGV[2])
-- the outcome, told to result waiters where the caller may publish (they find no record)
if waited then tell_outcome(base, ARGV[1], 'completed') end
if marker then open_window(marker, held[2]) end
return 1
