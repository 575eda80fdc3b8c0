-- EMQ lane_extends (both wires). KEYS: lanes:active, base. ARGV: lease_ms, stamp, id1, token1, ... idk, tokenk.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/lanes.lua.
-- EXTENDS for lane leases: one reply per pair, the new deadline, or 0 for a lease that is lost
-- (token, state or membership). stamp 1 (wire 6) writes the server's run_id as lease_epoch.
lanes(KEYS[2])
local deadline = now_ms() + tonumber(ARGV[1])
local epoch = ARGV[2] == '1' and lease_epoch
if epoch then epoch() end  -- read before any pair: a refused INFO refuses the step, whatever is held
return renew(KEYS[1], deadline, base, 3, epoch)
