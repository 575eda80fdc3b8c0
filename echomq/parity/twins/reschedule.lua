-- The parity instrument's model of EMQ.RESCHEDULE on a script node (no script ships:
-- SPEC §4). From SPEC §3's row, in the scripts' trusting style: a row is enough.
-- KEYS: schedule, base. ARGV: id, delay_ms.
local row = KEYS[2] .. 'job:' .. ARGV[1]
if redis.call('EXISTS', row) == 0 then return 0 end
local t = redis.call('TIME')
local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], due, ARGV[1])
return due
