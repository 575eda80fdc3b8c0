-- The completed record (docs/spec.md §12): what PUBLISH, lane_complete and flow_complete keep of a
-- job they finished, for a result waiter or a later read. Two layouts: a field of the queue's hash
-- `done` (the id, its packed record, its own expiry), or the key `done:<id>` of the nodes without
-- hash-field expiry and of the queues whose `meta results` is `record` (a rolling upgrade's).

-- Whether this node keeps a hash field's own expiry with HSETEX (Valkey 9, Redis 8), read once.
-- Valkey shows its own version in `server` (its `redis` says 7.2.4); Redis 7 has no `server`, and a
-- script that names a global it lacks fails, so the table is looked up raw.
local FIELD_EXPIRY = (function()
  local valkey = rawget(_G, 'server')
  if valkey and valkey.VALKEY_VERSION_NUM then return valkey.VALKEY_VERSION_NUM >= 0x090000 end
  return (redis.REDIS_VERSION_NUM or 0) >= 0x080000
end)()

-- done_fields(results) -> whether the queue's records are fields of `done`, from its `meta
-- results` switch as read (false when absent): on a node with field expiry, unless it is `record`
local function done_fields(results)
  return FIELD_EXPIRY and results ~= 'record'
end

-- done_refused(base, fields) -> the refusal of a `done` hash of another type when the records are
-- its fields (`done:<id>` is not looked at: PUBLISH's DEL replaces whatever holds it), else nil. A
-- read: the caller makes it before its first write.
local function done_refused(base, fields)
  if not fields then return nil end
  local dtype = redis.call('TYPE', base .. 'done')['ok']
  if dtype ~= 'none' and dtype ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
  end
end

-- packed_record(attempts, now, created, started, result) -> the field's value: attempts, finished,
-- created, started (empty when the row had none), each ASCII decimal, then the result's bytes,
-- joined by `,` (the result is everything after the fourth)
local function packed_record(attempts, now, created, started, result)
  return attempts .. ',' .. now .. ',' .. (created or '') .. ',' .. (started or '') .. ',' .. result
end

-- keep_fields(base, records, retention, now): records (id1, packed1, ...) as fields of `done`,
-- expiring `retention` ms after now, in one HSETEX (a field written again loses its older value and
-- expiry)
local function keep_fields(base, records, retention, now)
  redis.call('HSETEX', base .. 'done', 'PXAT', now + retention, 'FIELDS', #records / 2, unpack(records))
end

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

-- keep_done(base, fields, id, attempts, result, retention, created, started, now): one job's
-- record in its queue's layout (`fields`: done_fields): its field of `done`, or write_done's record
-- written anew (an older record of the same id goes whole first)
local function keep_done(base, fields, id, attempts, result, retention, created, started, now)
  if fields then
    keep_fields(base, {id, packed_record(attempts, now, created, started, result)}, retention, now)
    return
  end
  redis.call('DEL', base .. 'done:' .. id)
  write_done(base, id, attempts, result, retention, created, started, now)
end
