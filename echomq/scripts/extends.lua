-- EMQ extends (wire 4). KEYS: active, base. ARGV: lease_ms, id1, token1, ... idk, tokenk.
-- Loaded after lib/clock.lua, lib/held.lua.
-- Each pair as extend; one reply per pair, 0 for a lost lease or a row not active in active.
local deadline = now_ms() + tonumber(ARGV[1])
return renew(KEYS[1], deadline, KEYS[2], 2)
