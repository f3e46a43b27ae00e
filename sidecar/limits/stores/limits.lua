-- Every shared-state limit of one request, in evaluation order, in one EVALSHA.
-- KEYS: two per op. ARGV: now_ms, member, then seven per op:
--   kind, a, b, c, d, e, f   (see redis-store.ts encodeOp)
-- Stops at the first refusal, so a refused request consumes nothing after it (quota
-- included). Reply: per op run, {allowed, limit, remaining, reset_ms, old, new} where
-- old/new are the smoothed allowance before and after (equal when unchanged).

local now = tonumber(ARGV[1])
local member = ARGV[2]

local function oldest_reset(log, per)
  local first = redis.call('ZRANGEBYSCORE', log, '(' .. (now - per), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if first[2] then return tonumber(first[2]) + per end
  return now + per
end

-- Same rule as smoothing.ts (SPEC 1.6); the allowance is shared by every gateway.
-- `requests` is the window's count before this request, so an idle window reads 0.
local function smooth(key, requests, rate, per, threshold, step, trigger, delay)
  local state = redis.call('HMGET', key, 'a', 't')
  local allowance = tonumber(state[1]) or threshold
  local changed = tonumber(state[2]) or 0
  local old = allowance
  if now - changed >= delay then
    if requests > allowance - step * trigger and allowance < rate then
      allowance = math.min(rate, allowance + step)
    elseif requests < allowance - step * (1 + trigger) and allowance > threshold then
      allowance = math.max(threshold, allowance - step)
    end
  end
  if allowance ~= old or not state[1] then
    changed = (allowance ~= old) and now or changed
    redis.call('HSET', key, 'a', allowance, 't', changed)
  end
  -- Idle longer than this, the allowance would have fallen back to threshold anyway.
  redis.call('PEXPIRE', key, per * 2 + delay + 1000)
  return allowance, old
end

-- Sliding log: every request is logged, blocked ones too (spike arrest).
local function sliding(log, smooth_key, rate, per, threshold, step, trigger, delay, m)
  redis.call('ZREMRANGEBYSCORE', log, '-inf', now - per)
  local count = redis.call('ZCARD', log)
  redis.call('ZADD', log, now, m)
  redis.call('PEXPIRE', log, per)
  local allowance, old = rate, rate
  if threshold > 0 then
    allowance, old = smooth(smooth_key, count, rate, per, threshold, step, trigger, delay)
  end
  if count < allowance then
    return {1, allowance, allowance - count - 1, oldest_reset(log, per), old, allowance}
  end
  return {0, allowance, 0, oldest_reset(log, per), old, allowance}
end

-- Sentinel: once the limit is reached a flag blocks for `per` without touching the log.
-- Trimming and expiry of the log are the background writes (redis-store.ts).
local function sentinel(log, flag, rate, per, m)
  local blocked = redis.call('PTTL', flag)
  if blocked > 0 then return {0, rate, 0, now + blocked, 0, 0} end
  local count = redis.call('ZCOUNT', log, '(' .. (now - per), '+inf')
  if count >= rate then
    redis.call('SET', flag, '1', 'PX', per)
    return {0, rate, 0, now + per, 0, 0}
  end
  redis.call('ZADD', log, now, m)
  if count + 1 >= rate then redis.call('SET', flag, '1', 'PX', per) end
  return {1, rate, rate - count - 1, oldest_reset(log, per), 0, 0}
end

-- Fixed window: the key names the window (aligned to per); expiry per.
local function fixed(counter, rate, per, window_end)
  local n = redis.call('INCR', counter)
  if n == 1 then redis.call('PEXPIRE', counter, per) end
  if n <= rate then return {1, rate, rate - n, window_end, 0, 0} end
  return {0, rate, 0, window_end, 0, 0}
end

local function quota(key, max, renewal, init_remaining, init_renews)
  local state = redis.call('HMGET', key, 'r', 'n')
  local remaining = tonumber(state[1]) or init_remaining
  local renews = tonumber(state[2]) or init_renews
  if renewal > 0 and now >= renews then
    remaining = max
    renews = now + renewal
  end
  remaining = math.min(remaining, max)
  local allowed = remaining > 0
  if allowed then remaining = remaining - 1 end
  redis.call('HSET', key, 'r', remaining, 'n', renews)
  if renewal > 0 then redis.call('PEXPIREAT', key, renews + renewal) end
  return {allowed and 1 or 0, max, remaining, renews, 0, 0}
end

local results = {}
local k = 1
for i = 3, #ARGV, 7 do
  local kind = ARGV[i]
  local a, b, c, d, e, f = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]),
    tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6])
  local r
  if kind == 'L' then
    r = sliding(KEYS[k], KEYS[k + 1], a, b, c, d, e, f, member .. ':' .. i)
  elseif kind == 'S' then
    r = sentinel(KEYS[k], KEYS[k + 1], a, b, member .. ':' .. i)
  elseif kind == 'F' then
    r = fixed(KEYS[k], a, b, c)
  else
    r = quota(KEYS[k], a, b, c, d)
  end
  results[#results + 1] = r
  k = k + 2
  if r[1] == 0 then break end
end
return results
