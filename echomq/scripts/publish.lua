-- EMQ publish (wire 4). KEYS: active, base. ARGV: id, token, result, retention_ms.
-- COMPLETE's move and checks, then, in the same step: the completed record `done:<id>` (the
-- result, attempts, created, started, finished) expiring retention_ms from now (0 keeps
-- none), the `completed` event when `meta events` is on, and `completed` on the job's
-- outcome channel where the caller may publish (docs/spec.md §12).
local base = KEYS[2]
local id = ARGV[1]
local row = base .. 'job:' .. id
local held, answer = fence('EMQ.PUBLISH', row, id, ARGV[2], KEYS[1], 'active', 'created', 'started', 'unique')
if not held then return answer end
local bound, refused = event_switch(base)
if refused then return refused end
-- a unique window (docs/spec.md §14): the id is not admitted again for `unique` ms from now
local marker = held[5] and base .. 'unique:' .. id
if marker then
  if not string.match(held[5], '^%d+$') then return redis.error_reply('EMQ hash value is not an integer') end
  local mtype = redis.call('TYPE', marker)['ok']
  if mtype ~= 'none' and mtype ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
  end
end
redis.call('ZREM', KEYS[1], id)
redis.call('DEL', row)
redis.call('HINCRBY', base .. 'metrics:completed', 'count', 1)
local retention = tonumber(ARGV[4])
if retention > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local done = base .. 'done:' .. id
  redis.call('DEL', done)
  local record = {'result', ARGV[3], 'attempts', ARGV[2], 'finished', now}
  if held[3] then record[#record + 1] = 'created'; record[#record + 1] = held[3] end
  if held[4] then record[#record + 1] = 'started'; record[#record + 1] = held[4] end
  redis.call('HSET', done, unpack(record))
  redis.call('PEXPIREAT', done, now + retention)
end
add_event(base, bound, 'completed', id, ARGV[2])
-- the outcome, told where the caller may publish (a wake-up, not state: untold otherwise)
local channel = base .. 'outcome:' .. id
if redis.acl_check_cmd('SPUBLISH', channel, 'completed') then redis.call('SPUBLISH', channel, 'completed') end
if marker then
  local t = redis.call('TIME')
  local finished = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', marker, 'finished', finished)
  redis.call('PEXPIREAT', marker, finished + tonumber(held[5]))
end
return 1
