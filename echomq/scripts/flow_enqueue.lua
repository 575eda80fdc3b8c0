-- EMQ flow_enqueue (both wires). KEYS: the base of every queue the flow uses, one slot.
-- ARGV: seven per job, each parent before its children: queue (its base's index in KEYS), id,
-- payload, priority, parent (its parent's position in this list, from 1; 0 for the root),
-- children (how many), on_child_failure (fail | ignore | continue; read for a parent only).
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/failure.lua, lib/flow.lua.
-- One step: every parent flow:waiting with its children count and its record of them
-- (`flow:children:<id>`: their row keys, which confirm each child's `parent` link), every leaf
-- flow:pending.
-- Reply: 1 made; 0 when the root's id has a row (nothing written); EMQSTATE when another job's does.
-- Each job's `enqueued` event (state waiting or pending) in its queue, where events are on.
local n = #ARGV / 7
local rows = {}
for i = 1, n do
  rows[i] = KEYS[tonumber(ARGV[i * 7 - 6])] .. 'job:' .. ARGV[i * 7 - 5]
end
if redis.call('EXISTS', rows[1]) == 1 then return 0 end
for i = 2, n do
  if redis.call('EXISTS', rows[i]) == 1 then
    return redis.error_reply('EMQSTATE flow job ' .. rows[i] .. ' already has a row: nothing admitted')
  end
end
for i = 1, #KEYS do
  local refused = flow_switch(KEYS[i])
  if refused then return refused end
end
local now = now_ms()
for i = 1, n do
  local at = i * 7 - 7
  local base, id, priority = KEYS[tonumber(ARGV[at + 1])], ARGV[at + 2], tonumber(ARGV[at + 4])
  local parent, children = tonumber(ARGV[at + 5]), tonumber(ARGV[at + 6])
  local fields = {'payload', ARGV[at + 3], 'attempts', '0', 'created', now}
  if priority > 0 then fields[#fields + 1] = 'priority'; fields[#fields + 1] = ARGV[at + 4] end
  if parent > 0 then
    fields[#fields + 1] = 'parent'; fields[#fields + 1] = rows[parent]
    redis.call('SADD', flow_record(rows[parent]), rows[i])
  end
  if children > 0 then
    redis.call('HSET', rows[i], 'state', 'waiting', 'children', children, 'on_child_failure', ARGV[at + 7],
      unpack(fields))
    redis.call('ZADD', base .. 'flow:waiting', now, id)
    flow_event(base, 'enqueued', id, '0', 'state', 'waiting')
  else
    redis.call('HSET', rows[i], 'state', 'pending', unpack(fields))
    redis.call('ZADD', base .. 'flow:pending', priority, id)
    flow_event(base, 'enqueued', id, '0', 'state', 'pending')
    wake(base)
  end
end
return 1
