-- EMQ cancel (wire 4). KEYS: active, dead, base. ARGV: id.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua.
-- Revokes an active job's lease from outside: it goes dead (scored now) with last_error
-- `cancelled` and is counted, so its holder's next renewal answers 0 and its settle is
-- refused. No row answers 0; a row not active, not in active, a lane row or a flow child is
-- refused before any write.
local row = KEYS[3] .. 'job:' .. ARGV[1]
if redis.call('EXISTS', row) == 0 then return 0 end
local seen = redis.call('HMGET', row, 'group', 'parent', 'state')
local refused = foreign_refused(seen[1], seen[2]) or state_refused(seen[3], 'active')
  or set_refused(KEYS[1], 'active', ARGV[1])
if refused then return refused end
local bound, refused = event_switch(KEYS[3])
if refused then return refused end
local now = now_ms()
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('HSET', row, 'state', 'dead', 'last_error', 'cancelled', 'failed', now)
redis.call('HINCRBY', KEYS[3] .. 'metrics:failed', 'count', 1)
if bound then  -- the attempt is read only when it is told
  add_event(KEYS[3], bound, 'dead', ARGV[1], redis.call('HGET', row, 'attempts') or '0', 'error', 'cancelled',
    'state', 'dead')
end
tell_outcome(KEYS[3], ARGV[1], 'dead')
return 1
