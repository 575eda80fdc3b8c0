-- The server's clock and epoch (docs/spec.md §2), as every script reads them.

-- the server's time in ms (SPEC §2: TIME's seconds and microseconds)
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local epoch_read -- lease_epoch's reading: a step reads the run_id once

-- the server's run_id: the epoch a lease is stamped with, so a restart is told from a stall
local function lease_epoch()
  epoch_read = epoch_read or string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  return epoch_read
end
