-- GCRA: one decision over one or more buckets, in order, atomically, on
-- Redis's clock (one call's caller bucket, then its tool bucket).
--
-- KEYS[i]      a bucket: its theoretical arrival time (TAT), in microseconds
--              since the epoch, absent when the bucket is full
-- ARGV[2i-1]   its emission interval T in microseconds (1e6 / rate; may be
--              fractional)
-- ARGV[2i]     its burst b (at least 1)
--
-- Takes a token from each bucket in turn, and stops at the first that has
-- none (tokens taken from the buckets before it stay taken). Returns one
-- integer, the cheapest reply to send and parse: 0 when the call may go
-- ahead, else retry_after_us * 16 + i: bucket i (at most 15 buckets)
-- refused, and a token is there after retry_after_us, rounded up to the
-- microsecond so that waiting it is always enough, and capped at 2^48 us
-- (about nine years) so that the reply stays exact in a double.
--
-- Times are Lua numbers (doubles): microseconds since the epoch are about
-- 2^51, so they and the fractions of T are exact enough (a quarter of a
-- microsecond). The TAT is stored with 17 significant digits, which reads
-- back as the same double.

-- Redis < 5 replicates scripts verbatim unless told otherwise; TIME makes
-- this one non-deterministic. A no-op on Redis >= 5.
if redis.replicate_commands then
    redis.replicate_commands()
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

for i, key in ipairs(KEYS) do
    local interval = tonumber(ARGV[2 * i - 1])
    local burst = tonumber(ARGV[2 * i])
    local tat = tonumber(redis.call('GET', key) or '') or now
    if tat < now then
        tat = now
    end
    local new_tat = tat + interval
    local wait = new_tat - now - burst * interval
    if wait > 0 then
        return math.min(math.ceil(wait), 2 ^ 48) * 16 + i
    end
    -- Expire once the bucket is full again, so idle keys vanish.
    local ttl_ms = math.ceil((new_tat - now) / 1000) + 1
    redis.call('SET', key, string.format('%.17g', new_tat), 'PX', string.format('%d', ttl_ms))
end
return 0
