-- EMQ lane_limit (both wires). KEYS: base. ARGV: k, scope.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/lanes.lua.
-- scope: a group, or '' for the queue's default.
-- k jobs of one group may run at once: the group's own k, or without a group the queue's
-- default; k 0 removes the setting (the group falls back to the queue's, the queue's to 1).
-- Groups that may now start more take their turn. Reply: 1. A group's k is kept while it has no
-- jobs, so lanes:limit holds at most 10000 groups: a new one past that is refused (EMQSTATE), as is a
-- group name over 128 bytes (EMQARG), before any write.
lanes(KEYS[1])
local k = ARGV[1]
if ARGV[2] ~= '' then
  if k ~= '0' then
    local limits = base .. 'lanes:limit'
    local refused = setting_refused('lanes:limit', ARGV[2], redis.call('HEXISTS', limits, ARGV[2]) == 1,
      redis.call('HLEN', limits), 'remove the limits of groups that no longer need their own first (k 0)')
    if refused then return refused end
  end
  if k == '0' then redis.call('HDEL', base .. 'lanes:limit', ARGV[2]) else redis.call('HSET', base .. 'lanes:limit', ARGV[2], k) end
  if offer(ARGV[2]) then wake(base) end
  return 1
end
if k == '0' then redis.call('HDEL', base .. 'meta', 'lane_limit') else redis.call('HSET', base .. 'meta', 'lane_limit', k) end
local woke = false
for _, g in ipairs(redis.call('SMEMBERS', base .. 'lanes:groups')) do woke = offer(g) or woke end
if woke then wake(base) end
return 1
