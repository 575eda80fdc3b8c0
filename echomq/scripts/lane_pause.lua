-- EMQ lane_pause (both wires). KEYS: lanes:ready, base. ARGV: group.
-- The group starts no job until resumed; its running jobs finish. Reply: 1.
lanes(KEYS[2])
redis.call('SADD', base .. 'lanes:paused', ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
