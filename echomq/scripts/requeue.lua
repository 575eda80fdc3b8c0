-- EMQ requeue (wire 4). KEYS: active, pending, base. ARGV: id, token.
-- Loaded after lib/events.lua, lib/held.lua, lib/pending.lua.
-- The holder releases its job to pending at its priority; no counter is written, so no
-- budget is spent. A matching token on a row that is not active is refused (SPEC §9.1).
-- The `requeued` event when on. The job is claimable again: it writes the wake marker.
local row = KEYS[3] .. 'job:' .. ARGV[1]
local held, answer = fence(row, ARGV[1], ARGV[2], KEYS[1], 'active')
if not held then return answer end
local bound, refused = event_switch(KEYS[3])
if refused then return refused end
redis.call('ZREM', KEYS[1], ARGV[1])
to_pending(KEYS[2], row, ARGV[1])
redis.call('HSET', row, 'state', 'pending')
add_event(KEYS[3], bound, 'requeued', ARGV[1], ARGV[2], 'state', 'pending')
wake(KEYS[3])  -- claimable now: wake the waiters
return 1
