-- EMQ flow_claim (both wires). KEYS: flow:pending, flow:active, flow:schedule, base. ARGV: lease_ms, limit.
-- A paused queue answers empty. Retries whose backoff ran out go flow:schedule -> flow:pending
-- first; then up to `limit` jobs flow:pending -> flow:active, each lease stamped with the
-- server's run_id (lease_epoch) for the reaper's restart exemption. A ghost is popped and skipped.
-- Reply: {{id, payload, attempts, 1 for a parent (its children finished) else 0}, ...}. When none
-- was claimed, when to look again: the ms until the next retry in flow:schedule falls due; 0 while
-- flows are under way without one (a parent waits, or a flow lease is held); {} when there is no
-- flow work at all.
local base = KEYS[4]
if redis.call('HGET', base .. 'meta', 'paused') then return {} end
local now = flow_now()
local limit = tonumber(ARGV[2])
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', KEYS[3], id)
  local row = base .. 'job:' .. id
  if redis.call('EXISTS', row) == 1 then
    redis.call('ZADD', KEYS[1], tonumber(redis.call('HGET', row, 'priority') or '0'), id)
    redis.call('HSET', row, 'state', 'pending')
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
local popped = redis.call('ZPOPMIN', KEYS[1], limit)
local epoch = flow_epoch()
local claimed = {}
for i = 1, #popped, 2 do
  local id = popped[i]
  local row = base .. 'job:' .. id
  if redis.call('EXISTS', row) == 1 then
    local attempts = redis.call('HINCRBY', row, 'attempts', 1)
    redis.call('HSET', row, 'state', 'active', 'started', now, 'lease_epoch', epoch)
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), id)
    local held = redis.call('HMGET', row, 'payload', 'children')
    claimed[#claimed + 1] = {id, held[1], attempts, held[2] and 1 or 0}
  end
end
if #claimed == 0 then return next_due() end
return claimed
