-- EMQ lane_reap (both wires): the reaper's lane part. KEYS: lanes:active, dead, base.
-- ARGV: max_stalled, limit, stamp.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/lanes.lua, lib/reap.lua.
-- Expired lane leases (score <= now, lowest first, up to limit) get STALLED.CHECK's verdicts
-- (SPEC §5): a ghost leaves the set; exempt (stamp 1, wire 6: lease_epoch stamped and not the
-- server's run_id: the lease crossed a restart) goes back to its lane with no stall counted;
-- otherwise a stall is counted: back to its lane while stalled < max_stalled, else dead.
-- A job back in its lane keeps its place (its enqueue order). Held groups whose time has come
-- take their turn again. Reply: {recovered ids, exempt ids, dead ids, next}: next = ms until
-- the reaper has work again (the earliest lane lease deadline or held group's time), -1: none.
-- The events when on, as STALLED.CHECK's: a counted stall `stalled`, then `recovered` or `dead`;
-- an exempt lease `recovered` only; a ghost none.
lanes(KEYS[3])
if redis.call('EXISTS', base .. 'lanes:seq') == 0 then return {{}, {}, {}, -1} end  -- never had lanes
local bound, refused = event_switch(base)
if refused then return refused end
local now = now_ms()
release_due(now)
local epoch = ARGV[3] == '1' and lease_epoch()
local recovered, exempt, dead = {}, {}, {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))) do
  local row = base .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
  local f = redis.call('HMGET', row, 'group', 'lease_epoch', 'attempts')
  local attempt = f[3] or '0'
  if f[1] then
    local verdict = stall_verdict(row, epoch, f[2], tonumber(ARGV[1]))
    if verdict ~= 'exempt' then add_event(base, bound, 'stalled', id, attempt) end
    if verdict == 'dead' then
      die_stalled(base, KEYS[2], row, id, now)
      add_event(base, bound, 'dead', id, attempt, 'error', 'stalled', 'state', 'dead')
      tell_outcome(base, id, 'dead')
      free(f[1])
      dead[#dead + 1] = id
    else  -- back in its lane, exempt or not
      back_in_lane(row, id, f[1], {})
      add_event(base, bound, 'recovered', id, attempt, 'state', 'pending')
      local told = verdict == 'exempt' and exempt or recovered
      told[#told + 1] = id
    end
  end
end
local next = -1
for _, key in ipairs({KEYS[1], held}) do
  local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if head[2] then
    local wait = math.max(0, tonumber(head[2]) - now)
    if next < 0 or wait < next then next = wait end
  end
end
return {recovered, exempt, dead, next}
