-- EMQ counts (a declared read). KEYS: pending, active, schedule, dead, meta, base.
-- Reply: {pending, active, schedule, dead, paused 0|1, lane pending, lane active, flow waiting,
-- flow pending, flow active, flow scheduled}. The lane and flow jobs are in their own sets,
-- never in the flat four (docs/lanes-and-flows.md); lane pending sums every group's lane.
local base = KEYS[6]
local lane_pending = 0
for _, g in ipairs(redis.call('SMEMBERS', base .. 'lanes:groups')) do
  lane_pending = lane_pending + redis.call('ZCARD', base .. 'lane:' .. g)
end
return {
  redis.call('ZCARD', KEYS[1]),
  redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]),
  redis.call('HEXISTS', KEYS[5], 'paused'),
  lane_pending,
  redis.call('ZCARD', base .. 'lanes:active'),
  redis.call('ZCARD', base .. 'flow:waiting'),
  redis.call('ZCARD', base .. 'flow:pending'),
  redis.call('ZCARD', base .. 'flow:active'),
  redis.call('ZCARD', base .. 'flow:schedule'),
}
