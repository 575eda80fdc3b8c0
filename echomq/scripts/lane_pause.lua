-- EMQ lane_pause (both wires). KEYS: lanes:ready, base. ARGV: group.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/lanes.lua.
-- The group starts no job until resumed; its running jobs finish. Reply: 1. A pause is kept while
-- the group has no jobs, so lanes:paused holds at most 10000 groups: a new one past that is refused
-- (EMQSTATE), as is a group name over 128 bytes (EMQARG), before any write.
lanes(KEYS[2])
local paused = base .. 'lanes:paused'
local refused = setting_refused('lanes:paused', ARGV[1], redis.call('SISMEMBER', paused, ARGV[1]) == 1,
  redis.call('SCARD', paused), 'resume the groups no longer paused first')
if refused then return refused end
redis.call('SADD', paused, ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
