-- EMQ flow_claim (both wires). KEYS: flow:pending, flow:active, flow:schedule, base. ARGV: lease_ms, limit.
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/failure.lua, lib/flow.lua, lib/claim.lua.
-- A paused queue answers empty. Retries whose backoff ran out go flow:schedule -> flow:pending
-- first; then up to `limit` jobs flow:pending -> flow:active, each lease stamped with the
-- server's run_id (lease_epoch) for the reaper's restart exemption. A ghost is popped and skipped.
-- Reply: {{id, payload, attempts, 1 for a parent (its children finished) else 0}, ...}. When none
-- was claimed, when to look again: the ms until the next retry in flow:schedule falls due; 0 while
-- flows are under way without one (a parent waits, or a flow lease is held); {} when there is no
-- flow work at all. The queue's rate limit (docs/spec.md §13) counts flow starts as CLAIM counts flat
-- ones, in the same log: at most its room in the window start, and when the window is full while
-- jobs wait in flow:pending, the ms until a start may happen. Events when on: `promoted` for a
-- retry moved to flow:pending, `claimed` for each start.
local base = KEYS[4]
local paused, bound, rate_limit, window, refused = switches(base .. 'meta')
if refused then return refused end
if paused then return {} end
flow_bounds[base] = bound or false  -- what flow_switch would read: its events' switch
local now = now_ms()
local limit = tonumber(ARGV[2])
local log = rate_limit and base .. 'rate'
local recent = rate_limit and redis.pcall('ZCOUNT', log, '(' .. (now - window), '+inf')
if type(recent) == 'table' then return recent end  -- a wrong-typed log
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', KEYS[3], id)
  local row = base .. 'job:' .. id
  if redis.call('EXISTS', row) == 1 then
    local held = redis.call('HMGET', row, 'priority', 'attempts')
    redis.call('ZADD', KEYS[1], pending_score(held[1]), id)
    redis.call('HSET', row, 'state', 'pending')
    flow_event(base, 'promoted', id, held[2] or '0', 'state', 'pending')
  end
end
-- nothing to claim: when to look again
local function next_due()
  local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if head[2] then return math.max(1, tonumber(head[2]) - now) end
  if redis.call('EXISTS', KEYS[2], base .. 'flow:waiting') > 0 then return 0 end
  return {}
end
if redis.call('EXISTS', KEYS[1]) == 0 then return next_due() end -- an idle queue's poll writes nothing
if rate_limit then
  if recent >= rate_limit then return rate_wait(log, now, window, recent, rate_limit) end
  limit = math.min(limit, rate_limit - recent)
end
local popped = redis.call('ZPOPMIN', KEYS[1], limit)
local epoch = lease_epoch()
local claimed = {}
for i = 1, #popped, 2 do
  local id = popped[i]
  local row = base .. 'job:' .. id
  if redis.call('EXISTS', row) == 1 then
    local attempts = redis.call('HINCRBY', row, 'attempts', 1)
    redis.call('HSET', row, 'state', 'active', 'started', now, 'lease_epoch', epoch)
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), id)
    if log then log_start(log, now, window, id, attempts) end
    flow_event(base, 'claimed', id, attempts)
    local held = redis.call('HMGET', row, 'payload', 'children')
    claimed[#claimed + 1] = {id, held[1], attempts, held[2] and 1 or 0}
  end
end
if #claimed == 0 then return next_due() end
return claimed
