-- The completed record (docs/spec.md §12): what PUBLISH, lane_complete and flow_complete keep of a
-- job they finished, for a result waiter or a later read.

-- write_done(base, id, attempts, result, retention, created, started, now): the record `done:<id>`
-- (result, attempts, finished `now`, and the row's created and started when it had them), expiring
-- `retention` ms after now, over no older record (the caller deleted it: PUBLISHES, with its rows)
local function write_done(base, id, attempts, result, retention, created, started, now)
  local done = base .. 'done:' .. id
  local record = {'result', result, 'attempts', attempts, 'finished', now}
  if created then record[#record + 1] = 'created'; record[#record + 1] = created end
  if started then record[#record + 1] = 'started'; record[#record + 1] = started end
  redis.call('HSET', done, unpack(record))
  redis.call('PEXPIREAT', done, now + retention)
end

-- keep_done(...): write_done's record, written anew: an older record of the same id goes whole first
local function keep_done(base, id, attempts, result, retention, created, started, now)
  redis.call('DEL', base .. 'done:' .. id)
  write_done(base, id, attempts, result, retention, created, started, now)
end
