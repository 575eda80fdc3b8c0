-- EMQ lane_complete (both wires). KEYS: lanes:active, base. ARGV: id, token.
-- As complete: the row deleted and counted; the group's slot freed (its next job may start).
lanes(KEYS[2])
local row, g = held_row('lane_complete', ARGV[1], ARGV[2])
if not row then return g end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', row)
redis.call('HINCRBY', base .. 'metrics:completed', 'count', 1)
free(g)
return 1
