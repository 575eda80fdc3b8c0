-- EMQ flow_reap (both wires). KEYS: flow:active, flow:pending, base. ARGV: max_stalled, limit.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/failure.lua, lib/flow.lua, lib/reap.lua.
-- STALLED.CHECK for flow leases, with its verdicts and budgets: up to `limit` members of
-- flow:active with score <= now, lowest first, each flow:active -> flow:pending or dead.
-- ghost (no row): removed. exempt (lease_epoch stamped and not the server's run_id: the lease
-- crossed a restart): back to flow:pending, no stall counted. Else stalled' = stalled + 1:
-- recover below max_stalled, die at it -- and a dead child's parent is told (lib/flow.lua),
-- which applies the parent's on_child_failure.
-- Reply: {recovered ids, exempt ids, dead ids}, each in selection order. Events when on, as
-- STALLED.CHECK's: a counted stall `stalled`, then `recovered` or `dead`; exempt `recovered` only.
local base = KEYS[3]
local now = now_ms()
local max_stalled = tonumber(ARGV[1])
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
if #expired == 0 then return {{}, {}, {}} end
for _, id in ipairs(expired) do  -- every queue a death may be told to, read before the first write
  local refused = flow_switches(base .. 'job:' .. id)
  if refused then return refused end
end
local epoch = lease_epoch()
local recovered, exempt, dead = {}, {}, {}
for _, id in ipairs(expired) do
  local row = base .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
  if redis.call('EXISTS', row) == 1 then
    local held = redis.call('HMGET', row, 'lease_epoch', 'priority', 'attempts')
    local attempt = held[3] or '0'
    local verdict = stall_verdict(row, epoch, held[1], max_stalled)
    if verdict ~= 'exempt' then flow_event(base, 'stalled', id, attempt) end
    if verdict == 'dead' then
      flow_die(base, id, 'stalled', now)
      dead[#dead + 1] = id
    else  -- back to flow:pending, exempt or not
      redis.call('ZADD', KEYS[2], pending_score(held[2]), id)
      redis.call('HSET', row, 'state', 'pending')
      flow_event(base, 'recovered', id, attempt, 'state', 'pending')
      local told = verdict == 'exempt' and exempt or recovered
      told[#told + 1] = id
    end
  end
end
if #recovered + #exempt > 0 then wake(base) end
return {recovered, exempt, dead}
