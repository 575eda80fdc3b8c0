-- EMQ promote (wire 4). KEYS: schedule, pending, base. ARGV: limit.
-- Loaded after lib/clock.lua, lib/events.lua, lib/pending.lua.
-- Moves up to limit due jobs (score <= now, lowest first) to pending at their priority.
-- A ghost gets a partial row (state only): the script trusts the keyspace. When events are on,
-- each moved job's `promoted` event, in selection order.
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
-- the queue's event switch, read when something is due
local bound, refused = event_bound(#due > 0 and redis.call('HGET', KEYS[3] .. 'meta', 'events'))
if refused then return refused end
for _, id in ipairs(due) do
  local row = KEYS[3] .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
  local seen = redis.call('HMGET', row, 'priority', 'attempts')
  redis.call('ZADD', KEYS[2], pending_score(seen[1]), id)
  redis.call('HSET', row, 'state', 'pending')
  add_event(KEYS[3], bound, 'promoted', id, seen[2] or '0', 'state', 'pending')
end
if #due > 0 then wake(KEYS[3]) end  -- claimable now: wake the waiters
return #due
