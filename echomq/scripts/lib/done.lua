-- The completed record (docs/spec.md §12): what PUBLISH, lane_complete and flow_complete keep of a
-- job they finished, for a result waiter or a later read.

-- keep_done(base, id, attempts, result, retention, created, started, now): the record `done:<id>`
-- (result, attempts, finished `now`, and the row's created and started when it had them), written
-- anew and expiring `retention` ms after now
local function keep_done(base, id, attempts, result, retention, created, started, now)
  local done = base .. 'done:' .. id
  redis.call('DEL', done)
  local record = {'result', result, 'attempts', attempts, 'finished', now}
  if created then record[#record + 1] = 'created'; record[#record + 1] = created end
  if started then record[#record + 1] = 'started'; record[#record + 1] = started end
  redis.call('HSET', done, unpack(record))
  redis.call('PEXPIREAT', done, now + retention)
end
