-- EMQ lane_claim (both wires). KEYS: lanes:ready, lanes:active, base. ARGV: lease_ms, stamp.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/lanes.lua, lib/claim.lua.
-- The group whose turn it is starts its next job: round-robin over the groups that may start
-- one (not paused, not held, fewer than k running). A paused queue holds lanes too (the pause
-- is read here, on both wires). stamp 1 (wire 6) writes the server's run_id as lease_epoch.
-- Reply: {id, payload, attempts, group}, or empty; 0 when the queue never had a lane job
-- (`lanes:seq` absent: a worker probes its lanes less often). The `claimed` event when on.
-- The queue's rate limit (docs/spec.md §13) counts lane starts as CLAIM counts flat ones, in the
-- same log: when its window holds the limit and a group could start a job, the reply is the ms
-- until a start may happen (an integer >= 1), and nothing starts.
lanes(KEYS[3])
if redis.call('EXISTS', base .. 'lanes:seq') == 0 then return 0 end
local paused, bound, limit, window, refused = switches(base .. 'meta')
if refused then return refused end
if paused then return {} end
local now = now_ms()
local log = limit and base .. 'rate'
local recent = limit and redis.pcall('ZCOUNT', log, '(' .. (now - window), '+inf')
if type(recent) == 'table' then return recent end  -- a wrong-typed log
release_due(now)
if limit and recent >= limit and redis.call('ZCARD', KEYS[1]) > 0 then
  return rate_wait(log, now, window, recent, limit)
end
for _ = 1, 100 do  -- a turn that finds no job (a ghost) passes to the next group
  local turn = redis.call('ZPOPMIN', KEYS[1])
  if #turn == 0 then return {} end
  local g = turn[1]
  local popped = redis.call('ZPOPMIN', base .. 'lane:' .. g)
  local id = popped[1]
  local row = id and base .. 'job:' .. id
  if row and redis.call('EXISTS', row) == 1 then
    redis.call('HINCRBY', running, g, 1)
    local attempts = redis.call('HINCRBY', row, 'attempts', 1)
    redis.call('HSET', row, 'state', 'active', 'started', now)
    if ARGV[2] == '1' then redis.call('HSET', row, 'lease_epoch', lease_epoch()) end
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), id)
    add_event(base, bound, 'claimed', id, attempts)
    if log then log_start(log, now, window, id, attempts) end
    offer(g)  -- at the back of the round, if it may start another
    return {id, redis.call('HGET', row, 'payload'), attempts, g}
  end
  offer(g)
  tidy(g)
end
return {}
