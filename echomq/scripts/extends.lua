-- EMQ extends (wire 4). KEYS: active, base. ARGV: lease_ms, id1, token1, ... idk, tokenk.
-- Each pair as extend; one reply per pair, 0 for a lost lease or a row not active in active.
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
return renew(KEYS[1], deadline, KEYS[2], 2)
