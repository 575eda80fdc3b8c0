-- EMQ flow_extends (both wires). KEYS: flow:active, base. ARGV: lease_ms, id1, token1, ... idk, tokenk.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/failure.lua, lib/flow.lua.
-- EXTENDS for flow leases: each pair whose token matches a row active in flow:active gets the new
-- deadline and the server's run_id; one reply per pair, the deadline or 0.
local deadline = now_ms() + tonumber(ARGV[1])
return renew(KEYS[1], deadline, KEYS[2], 2, lease_epoch)
