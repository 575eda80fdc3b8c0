-- The reaper's rule for an expired lease (SPEC §5, "STALLED.CHECK: the restart exemption and the
-- stall budget"), said once for STALLED.CHECK's script twin and the lane and flow reapers.

-- stall_verdict(row, epoch, stamped, max_stalled) -> 'exempt', 'recovered' or 'dead': a lease
-- stamped (`stamped`, the row's lease_epoch) with another run's epoch crossed a server restart
-- and counts no stall; any other expiry counts one (HINCRBY row stalled 1), and the job dies
-- once it reaches max_stalled. `epoch`: the server's run_id, or false where no exemption is
-- granted (the flat script twin: its claims stamp no epoch)
local function stall_verdict(row, epoch, stamped, max_stalled)
  if epoch and stamped and stamped ~= epoch then return 'exempt' end
  if redis.call('HINCRBY', row, 'stalled', 1) >= max_stalled then return 'dead' end
  return 'recovered'
end

-- the writes of a flat or lane job's death by stalling (the verdict 'dead'): its row dead with
-- last_error `stalled`, its id in `dead`, one more failure counted
local function die_stalled(base, dead, row, id, now)
  redis.call('HSET', row, 'state', 'dead', 'last_error', 'stalled', 'failed', now)
  redis.call('ZADD', dead, now, id)
  redis.call('HINCRBY', base .. 'metrics:failed', 'count', 1)
end
