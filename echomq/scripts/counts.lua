-- EMQ counts (a declared read). KEYS: pending, active, schedule, dead, meta.
-- Reply: {pending, active, schedule, dead, paused 0|1}.
return {
  redis.call('ZCARD', KEYS[1]),
  redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]),
  redis.call('HEXISTS', KEYS[5], 'paused'),
}
