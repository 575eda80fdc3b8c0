-- EMQ stalled_check (wire 4). KEYS: active, pending, dead, base. ARGV: max_stalled, limit.
-- Loaded after lib/clock.lua, lib/events.lua, lib/pending.lua, lib/reap.lua.
-- Every expired lease (score <= now, lowest first, up to limit) counts as a stall:
-- the script has no restart exemption (that needs the native lease_epoch). When events are on,
-- each member's `stalled`, then `recovered` or `dead`, in selection order.
-- Reply: {recovered ids, exempt ids (always empty here), dead ids}.
local now = now_ms()
local max_stalled = tonumber(ARGV[1])
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local recovered, dead = {}, {}
local bound, refused = event_switch(KEYS[4])
if refused then return refused end
for _, id in ipairs(expired) do
  local row = KEYS[4] .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
  if stall_verdict(row, false, nil, max_stalled) == 'dead' then
    die_stalled(KEYS[4], KEYS[3], row, id, now)
    if bound then  -- the attempt is read only when it is told
      local attempt = redis.call('HGET', row, 'attempts') or '0'
      add_event(KEYS[4], bound, 'stalled', id, attempt)
      add_event(KEYS[4], bound, 'dead', id, attempt, 'error', 'stalled', 'state', 'dead')
    end
    tell_outcome(KEYS[4], id, 'dead')
    dead[#dead + 1] = id
  else
    redis.call('HSET', row, 'state', 'pending')
    to_pending(KEYS[2], row, id)
    if bound then
      local attempt = redis.call('HGET', row, 'attempts') or '0'
      add_event(KEYS[4], bound, 'stalled', id, attempt)
      add_event(KEYS[4], bound, 'recovered', id, attempt, 'state', 'pending')
    end
    recovered[#recovered + 1] = id
  end
end
if #recovered > 0 then wake(KEYS[4]) end  -- claimable again: wake the waiters
return {recovered, {}, dead}
