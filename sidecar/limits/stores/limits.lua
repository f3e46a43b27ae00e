-- The shared-state limits of one or more requests, each in evaluation order, in one call of
-- `limits`: a Redis Function this file registers, or the same text run by EVALSHA where the
-- server offers no functions (limits-script.ts adds the one line either needs).
-- Gateways send the decisions that are due together in one call, so Redis pays the script's
-- fixed cost (and TIME) once for all of them; they run one after another, in the order sent,
-- exactly as separate calls back to back would.
-- KEYS: two per op, the ops of every request in order. ARGV: the clock and the deadline
-- (below), then per request: member, refused, resets, op count, then one per op: seven
-- little-endian doubles,
-- the kind's place in `kinds` and six fields, in the order listed above `kinds` (redis-store.ts
-- encodeOp / encodeUndo write them so; struct.unpack reads them in one call).
-- `member` names the decision; an op's log entry is member:<ordinal of the op in its request>.
-- `refused` is '1' when a limit outside Redis (the DRL) already refused the request, and 'p'
-- for a peek: every op reports what its limiter holds now and nothing is written (the
-- effective-limits read); a peek's row has the window's count where `old` stands.
-- `resets` is '1' when a response header shows the limits' reset times; otherwise the sliding
-- log and the sentinel leave them at 0 rather than look up their oldest entry.
--
-- A request's ops run in order and stop at the first refusal. A refused request (by an op
-- here, or `refused`) then consumes nothing: every admission its ops made is undone before
-- the next request runs. The refusing op keeps what its algorithm records for a refusal (the
-- sliding log logs it: spike arrest).
-- Lower-case kinds undo an admission made by an earlier call (a Redis Cluster runs each
-- limit as its own call, so a refusal in one slot is undone in the others afterwards).
--
-- Time is Redis's own (TIME), so every gateway reads one clock whatever its own says. A
-- non-empty clock argument replaces it: only the store conformance suite sets one, so that
-- the in-memory store and this script run one table of cases on one manual clock.
-- The deadline (Unix ms on Redis's clock, 0 for none) is when the gateway stops waiting for
-- the call. A call run after it (Redis stalled with the call in its input) has had its
-- requests answered without it: every request gets an error and nothing is written, so an
-- outage's answers are never counted once Redis is back (README.md#redis).
-- Reply: the numbers, packed as little-endian doubles (each an integer below 2^53, so exact),
-- then the error messages they refer to. The numbers: now_ms, then per request the number of
-- rows and six per row
--   allowed, limit, remaining, reset_ms, old, new   (old/new: the smoothed allowance before
--   and after, equal when unchanged), one row per upper-case op run;
-- or, for a request whose commands failed, -1 and the place of its error among the messages,
-- the other requests unaffected. Packed, the client reads the numbers without decoding a
-- reply element for each (docs/architecture.md#performance).
--
-- As a function, everything above `limits` is defined once per load rather than once per call
-- (docs/architecture.md#performance); the state of one call lives in the locals below, which
-- `limits` sets afresh on every call.

-- The call's keys and arguments, Redis's time (a number, and its digits), and whether the
-- request being run shows its reset times.
local keys, args, now, now_s, resets
-- The sliding logs this call has trimmed and given their expiry (for the window it trimmed
-- to), and each one's oldest entry once read. The requests of a call after the first that
-- meet a log (an API's, or a busy key's) skip its trim, its expiry and the read of its oldest
-- entry: at the call's one time they would find what the first found. Removing an entry (an
-- undo) forgets the log, since the entry may have been its oldest, or its last (the key is
-- then gone, and with it the expiry).
local visited, oldest
-- Each trimmed sliding log's number of entries once counted, kept as this call adds to it: at
-- the call's one time nothing leaves the window, so a later request meeting the log adds its
-- entry without counting the log again.
local counts
-- The sentinel logs this call has given their expiry (the sentinel trims in the background).
local lasting

-- Numbers go to redis.call as decimal strings made here: Redis would print each Lua number
-- with a floating-point format first, which cost more than the commands' own work
-- (docs/architecture.md#performance). Every number sent is an integer.
local function int(x) return string.format('%d', x) end
-- The log entry of op `j` of the request named `member` (`member:<ordinal>`); each ordinal's
-- digits are made once (per call, or per load as a function: they never change).
local ordinals = {}
local function entry(member, j)
  local o = ordinals[j]
  if not o then
    o = int(j)
    ordinals[j] = o
  end
  return member .. ':' .. o
end

-- An op's kind, by its code, and then its six fields (unused ones are 0). Upper case runs a
-- limit; lower case undoes an admission an earlier call made (`ordinal`: the op's place in
-- that call's request).
--   L: rate, per, threshold, step, trigger, delay     S, F: rate, per
--   Q: max, renewal, init_remaining, init_renews       l: ordinal   s: ordinal, flagged
--   f: window_start
local kinds = {'L', 'S', 'F', 'Q', 'l', 's', 'f'}

-- The op at args[i]: its kind and fields as values, so no table is made per op.
local function op_at(i)
  local code, f1, f2, f3, f4, f5, f6 = struct.unpack('<ddddddd', args[i])
  return kinds[code], f1, f2, f3, f4, f5, f6
end

-- Forgets what this call knows of a log.
local function forget(log)
  visited[log] = nil
  oldest[log] = nil
  counts[log] = nil
  lasting[log] = nil
end

-- When the oldest entry still in the window leaves it. `trimmed`: entries older than the
-- window are gone already, so the log's first entry is that one.
local function oldest_reset(log, per, trimmed)
  if not resets then return 0 end
  if trimmed and oldest[log] then return oldest[log] + per end
  local first
  if trimmed then
    first = redis.call('ZRANGE', log, '0', '0', 'WITHSCORES')
  else
    first = redis.call('ZRANGEBYSCORE', log, '(' .. int(now - per), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
  end
  if not first[2] then return now + per end
  local at = tonumber(first[2])
  if trimmed then oldest[log] = at end
  return at + per
end

-- When a caller refused now by a log of `n` entries (its own included) is admitted again if it
-- sends nothing more: once all but `allowance - 1` of them have left the window, that is when
-- the entry at place `n - allowance` (oldest first, from 0) leaves it. The oldest entry's time
-- would be too soon whenever the log holds more than the allowance, as it does once refused
-- requests are logged (docs/behaviour.md#response-headers). `trimmed` as for oldest_reset.
local function readmit_reset(log, per, n, allowance, trimmed)
  if not resets then return 0 end
  local place = n - allowance
  local at
  if trimmed then
    at = redis.call('ZRANGE', log, int(place), int(place), 'WITHSCORES')
  else
    at = redis.call('ZRANGEBYSCORE', log, '(' .. int(now - per), '+inf', 'WITHSCORES', 'LIMIT', int(place), '1')
  end
  -- A peek's `n` counts the request it asks about, which is not in the log: it would be now.
  if not at[2] then return now + per end
  return tonumber(at[2]) + per
end

-- Same rule as smoothing.ts (docs/behaviour.md#smoothing); the allowance is shared by every gateway.
-- `requests` is the window's count before this request, so an idle window reads 0. Returns the
-- allowance this request meets, the one before its step, and the stored state it came from;
-- nothing is written (a peek asks what a request would meet).
local function smoothed(key, requests, rate, threshold, step, trigger, delay)
  local state = redis.call('HMGET', key, 'a', 't')
  local stored = tonumber(state[1])
  -- An edit of the limit since (a lower rate, a higher threshold) puts a stored allowance back
  -- within its bounds at once; that is the edit's doing, not a smoothing step, so no event.
  local allowance = math.max(threshold, math.min(rate, stored or threshold))
  local changed = tonumber(state[2]) or 0
  local old = allowance
  if now - changed >= delay then
    if requests > allowance - step * trigger and allowance < rate then
      allowance = math.min(rate, allowance + step)
    elseif requests < allowance - step * (1 + trigger) and allowance > threshold then
      allowance = math.max(threshold, allowance - step)
    end
  end
  return allowance, old, stored, changed
end

local function smooth(key, requests, rate, per, threshold, step, trigger, delay)
  local allowance, old, stored, changed = smoothed(key, requests, rate, threshold, step, trigger, delay)
  if allowance ~= stored then
    changed = (allowance ~= old) and now or changed
    redis.call('HSET', key, 'a', allowance, 't', changed)
  end
  -- Idle longer than this, the allowance would have fallen back to threshold anyway.
  redis.call('PEXPIRE', key, int(per * 2 + delay + 1000))
  return allowance, old
end

-- Undoing an admission. A fixed-window counter is only decremented while it exists: once
-- its window has expired there is nothing left to give back.
local function unlog(log, m)
  redis.call('ZREM', log, m)
  forget(log)
end

local function unflag(log, flag, m, flagged)
  redis.call('ZREM', log, m)
  forget(log)
  if flagged then redis.call('DEL', flag) end
end

local function uncount(counter)
  if redis.call('EXISTS', counter) == 1 then redis.call('DECR', counter) end
end

-- Sliding log: every request is logged, blocked ones too (spike arrest).
local function sliding(log, smooth_key, rate, per, threshold, step, trigger, delay, m)
  local first_visit = visited[log] ~= per
  if first_visit then
    redis.call('ZREMRANGEBYSCORE', log, '-inf', int(now - per))
    -- A window of another length (a config change between two requests) may trim more.
    oldest[log] = nil
    counts[log] = nil
  end
  local count = counts[log] or redis.call('ZCARD', log)
  counts[log] = count + redis.call('ZADD', log, now_s, m)
  -- A later ZADD keeps the key's expiry, which is `per` after this call's time either way.
  if first_visit then
    redis.call('PEXPIRE', log, int(per))
    visited[log] = per
  end
  -- An empty window holds only this request's entry now.
  if count == 0 then oldest[log] = now end
  local allowance, old = rate, rate
  if threshold > 0 then
    allowance, old = smooth(smooth_key, count, rate, per, threshold, step, trigger, delay)
  end
  if count < allowance then
    return {1, allowance, allowance - count - 1, oldest_reset(log, per, true), old, allowance}
  end
  return {0, allowance, 0, readmit_reset(log, per, count + 1, allowance, true), old, allowance}
end

-- A sentinel log entry, with the log's expiry a window on: the background trim does not set
-- it, and an expiry set before this entry could end the log with the entry still in the window.
local function sentinel_log(log, per, m)
  redis.call('ZADD', log, now_s, m)
  counts[log] = nil
  if lasting[log] ~= per then
    redis.call('PEXPIRE', log, int(per))
    lasting[log] = per
  end
end

-- Sentinel: the sliding log's variant (docs/behaviour.md#algorithms). Every request is logged,
-- refused ones too, as in the sliding log; the request that reaches the limit, or one that
-- finds the window over it, sets a flag that refuses at once for `per`. A caller that keeps
-- pushing therefore finds the window full again when the flag ends and stays blocked, until
-- its rate has been under the limit for a whole window. The flag holds the time it blocks
-- until (its expiry is housekeeping), so the block follows the script's clock. Trimming the
-- log is the background write (redis-store.ts).
local function sentinel(log, flag, rate, per, m)
  local blocked_until = tonumber(redis.call('GET', flag))
  if blocked_until and blocked_until > now then
    sentinel_log(log, per, m)
    return {0, rate, 0, blocked_until, 0, 0}
  end
  local count = redis.call('ZCOUNT', log, '(' .. int(now - per), '+inf')
  sentinel_log(log, per, m)
  if count >= rate then
    redis.call('SET', flag, int(now + per), 'PX', int(per))
    return {0, rate, 0, now + per, 0, 0}
  end
  -- The flag was not blocking (checked above), so a flag set here is this request's own, and
  -- nothing passes before it ends: that is its reset.
  if count + 1 >= rate then
    redis.call('SET', flag, int(now + per), 'PX', int(per))
    return {1, rate, 0, now + per, 0, 0}
  end
  return {1, rate, rate - count - 1, oldest_reset(log, per, false), 0, 0}
end

-- Fixed window: one counter per window aligned to per (the key's suffix; the base names per,
-- so windows of two lengths that start together are two counters); expiry per. A refusal is
-- not counted, so a rate raised mid-window admits at once.
local function fixed(base, rate, per)
  local window_start = now - now % per
  local counter = base .. ':' .. string.format('%d', window_start)
  local n = redis.call('INCR', counter)
  if n == 1 then redis.call('PEXPIRE', counter, int(per)) end
  if n <= rate then return {1, rate, rate - n, window_start + per, 0, 0} end
  redis.call('DECR', counter)
  return {0, rate, 0, window_start + per, 0, 0}
end

-- The quota as a request now finds it: renewed if its period has ended.
-- A quota's state: remaining 'r', renewal time 'n', and the max 'm' it was counted against.
-- What a period has used stays used when the max changes (a Policy edit): a raised max gives
-- the difference at once, a lowered one takes it away (memory-store.ts does the same). So 'r'
-- goes below 0 when a max is lowered under the use: what was used then reads as used, and a max
-- raised again gives back only what the period has not used. Returns the balance (at most max).
local function quota_state(key, max, renewal, init_remaining, init_renews)
  local state = redis.call('HMGET', key, 'r', 'n', 'm')
  local renews = tonumber(state[2]) or init_renews
  if renewal > 0 and now >= renews then
    return max, now + renewal, state
  end
  local stored = tonumber(state[1])
  if not stored then return math.max(0, math.min(init_remaining, max)), renews, state end
  -- The change of max first: unchanged it is 0, so a balance near 2^53 is not rounded.
  return math.min(stored + (max - (tonumber(state[3]) or max)), max), renews, state
end

-- Checked last: nothing after it can refuse, so a quota is never given back.
local function quota(key, max, renewal, init_remaining, init_renews)
  local balance, renews, state = quota_state(key, max, renewal, init_remaining, init_renews)
  local allowed = balance > 0
  if allowed then balance = balance - 1 end
  redis.call('HSET', key, 'r', int(balance), 'n', int(renews), 'm', int(max))
  -- HSET keeps the key's expiry, which only moves when the renewal time does.
  if renewal > 0 and (renews ~= tonumber(state[2]) or not state[1]) then redis.call('PEXPIREAT', key, int(renews + renewal)) end
  return {allowed and 1 or 0, max, math.max(0, balance), renews, 0, 0}
end

-- Peeks: what a limiter holds now, as a request arriving now would find it; nothing is
-- written. Rows: would-admit, limit, remaining, reset_ms, count, 0.
local function peeked(count, limit, reset)
  local remaining = math.max(0, limit - count)
  return {remaining > 0 and 1 or 0, limit, remaining, reset, count, 0}
end

local function window_count(log, per)
  return redis.call('ZCOUNT', log, '(' .. int(now - per), '+inf')
end

-- A smoothed limit's row has the allowance the request would meet, its smoothing step taken.
local function peek_sliding(log, smooth_key, rate, per, threshold, step, trigger, delay)
  local count = window_count(log, per)
  local allowance = rate
  if threshold > 0 then allowance = smoothed(smooth_key, count, rate, threshold, step, trigger, delay) end
  if count >= allowance then return peeked(count, allowance, readmit_reset(log, per, count + 1, allowance, false)) end
  return peeked(count, allowance, oldest_reset(log, per, false))
end

local function peek_sentinel(log, flag, rate, per)
  local count = window_count(log, per)
  local blocked_until = tonumber(redis.call('GET', flag))
  if blocked_until and blocked_until > now then return {0, rate, 0, blocked_until, count, 0} end
  return peeked(count, rate, oldest_reset(log, per, false))
end

local function peek_fixed(base, rate, per)
  local window_start = now - now % per
  local count = tonumber(redis.call('GET', base .. ':' .. string.format('%d', window_start))) or 0
  return peeked(count, rate, window_start + per)
end

local function peek_quota(key, max, renewal, init_remaining, init_renews)
  local balance, renews = quota_state(key, max, renewal, init_remaining, init_renews)
  return {balance > 0 and 1 or 0, max, math.max(0, balance), renews, math.max(0, max - balance), 0}
end

local function peek(k, a, nops)
  local rows = {}
  for j = 1, nops do
    local kind, f1, f2, f3, f4, f5, f6 = op_at(a + j - 1)
    if kind == 'L' then
      rows[j] = peek_sliding(keys[k], keys[k + 1], f1, f2, f3, f4, f5, f6)
    elseif kind == 'S' then
      rows[j] = peek_sentinel(keys[k], keys[k + 1], f1, f2)
    elseif kind == 'F' then
      rows[j] = peek_fixed(keys[k], f1, f2)
    else
      rows[j] = peek_quota(keys[k], f1, f2, f3, f4)
    end
    k = k + 2
  end
  return rows
end

-- Undoes what op `j` of a request (KEYS from `k`, ARGV from `a`) admitted, its row in hand:
-- the log entry it wrote, the sentinel flag it set (when it left no allowance), the count it
-- added to its window (which starts `per` before the row's reset).
local function undo_admission(k, a, member, j, row)
  local kind, _, per = op_at(a + j - 1)
  local at = k + 2 * (j - 1)
  if kind == 'L' then
    unlog(keys[at], entry(member, j))
  elseif kind == 'S' then
    unflag(keys[at], keys[at + 1], entry(member, j), row[3] == 0)
  elseif kind == 'F' then
    uncount(keys[at] .. ':' .. int(row[4] - per))
  end
end

-- One request: `nops` ops from keys[k] and args[a], rows appended to `reply`.
local function decide(k, a, member, refused, nops)
  local rows = {}
  -- The op of each row, for undoing its admission.
  local row_ops = {}
  local key = k
  for j = 1, nops do
    local kind, f1, f2, f3, f4, f5, f6 = op_at(a + j - 1)
    local r
    if kind == 'L' then
      r = sliding(keys[key], keys[key + 1], f1, f2, f3, f4, f5, f6, entry(member, j))
    elseif kind == 'S' then
      r = sentinel(keys[key], keys[key + 1], f1, f2, entry(member, j))
    elseif kind == 'F' then
      r = fixed(keys[key], f1, f2)
    elseif kind == 'Q' then
      r = quota(keys[key], f1, f2, f3, f4)
    elseif kind == 'l' then
      unlog(keys[key], entry(member, f1))
    elseif kind == 's' then
      unflag(keys[key], keys[key + 1], entry(member, f1), f2 == 1)
    else
      uncount(keys[key] .. ':' .. int(f1))
    end
    key = key + 2
    if r then
      rows[#rows + 1] = r
      row_ops[#rows] = j
      if r[1] == 0 then
        refused = true
        break
      end
    end
  end
  if refused then
    -- The refusing op keeps what it recorded; a quota, always last, is never given back.
    for n, r in ipairs(rows) do
      if r[1] == 1 then undo_admission(k, a, member, row_ops[n], r) end
    end
  end
  return rows
end

-- One call (KEYS and ARGV as the top of this file lays them out).
local function limits(call_keys, call_args)
  keys, args = call_keys, call_args
  now = tonumber(args[1])
  if not now then
    local time = redis.call('TIME')
    now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  now_s = int(now)
  resets = false
  visited, oldest, counts, lasting = {}, {}, {}, {}

  local reply = {now}
  local errors = {}
  local deadline = tonumber(args[2])
  local k, a = 1, 3
  if deadline > 0 and now > deadline then
    errors[1] = 'the call reached Redis after its deadline: nothing was counted'
    while a <= #args do
      reply[#reply + 1] = -1
      reply[#reply + 1] = 1
      a = a + 4 + tonumber(args[a + 3])
    end
    return {struct.pack('<' .. string.rep('d', #reply), unpack(reply)), errors[1]}
  end
  while a <= #args do
    local member, mode, nops = args[a], args[a + 1], tonumber(args[a + 3])
    resets = args[a + 2] == '1' or mode == 'p'
    local ok, rows
    if mode == 'p' then
      ok, rows = pcall(peek, k, a + 4, nops)
    else
      ok, rows = pcall(decide, k, a + 4, member, mode == '1', nops)
    end
    if ok then
      reply[#reply + 1] = #rows
      for _, r in ipairs(rows) do
        for c = 1, 6 do reply[#reply + 1] = r[c] end
      end
    else
      errors[#errors + 1] = type(rows) == 'table' and (rows.err or 'script error') or tostring(rows)
      reply[#reply + 1] = -1
      reply[#reply + 1] = #errors
    end
    k = k + 2 * nops
    a = a + 4 + nops
  end

  -- In slices: unpack puts every value of a slice on Lua's C stack.
  local packed = {}
  for first = 1, #reply, 512 do
    local last = math.min(first + 511, #reply)
    packed[#packed + 1] = struct.pack('<' .. string.rep('d', last - first + 1), unpack(reply, first, last))
  end
  return {table.concat(packed), unpack(errors)}
end
