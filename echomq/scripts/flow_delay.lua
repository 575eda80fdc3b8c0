-- EMQ flow_delay (both wires). KEYS: flow:active, flow:schedule, base. ARGV: id, token, delay_ms.
-- DELAY for a flow job: flow:active -> flow:schedule at now + delay_ms, no budget spent (failures
-- and last_error stay as they were); flow_claim moves it back to flow:pending when it is due.
-- Reply: the due time (ms); 0 when no row or the token does not match; EMQSTATE when the row is
-- not active in flow:active. The `delayed` event when on.
local base, id = KEYS[3], ARGV[1]
local row = base .. 'job:' .. id
local held = redis.call('HMGET', row, 'attempts', 'state')
if held[1] ~= ARGV[2] then return 0 end
if held[2] ~= 'active' then
  return redis.error_reply('EMQSTATE flow_delay row ' .. (held[2] and 'is ' .. held[2] or 'has no state') .. ', not active')
end
if not redis.call('ZSCORE', KEYS[1], id) then return redis.error_reply('EMQSTATE flow_delay id is not in flow:active') end
local refused = flow_switch(base)
if refused then return refused end
local due = flow_now() + tonumber(ARGV[3])
redis.call('ZREM', KEYS[1], id)
redis.call('ZADD', KEYS[2], due, id)
redis.call('HSET', row, 'state', 'scheduled')
flow_event(base, 'delayed', id, ARGV[2], 'state', 'scheduled')
return due
