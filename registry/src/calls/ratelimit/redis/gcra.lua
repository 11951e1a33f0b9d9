-- GCRA: one or more decisions, each over one or more buckets, in order,
-- atomically, on Redis's clock (one call's caller bucket, then its tool
-- bucket; the decisions one serving thread gathered on one tool).
--
-- KEYS       every bucket's key, once: a bucket holds its theoretical
--            arrival time (TAT), in microseconds since the epoch, and is
--            absent when full
-- ARGV       the bucket count n; then per bucket its key's index in KEYS,
--            its emission interval T in microseconds (1e6 / rate; may be
--            fractional) and its burst b (at least 1); then one string of
--            the decisions: per decision its bucket count k, then k bucket
--            indices (from 1), each a big-endian 16-bit number
--
-- Each decision takes a token from its buckets in turn, and stops at the
-- first that has none (tokens taken from the buckets before it stay taken).
-- Returns the number of decisions, then two integers per refused decision
-- (none for a call that may go ahead, the common case, so the reply is
-- cheap to send and parse): the decision's place, from 1, and
-- retry_after_us * 16 + i: bucket i of the decision (at most 15 buckets)
-- refused, and a token is there after retry_after_us, rounded up to the
-- microsecond so that waiting it is always enough, and capped at 2^48 us
-- (about nine years) so that the reply stays exact in a double.
--
-- A key that several decisions take from is read once and written once:
-- the decisions in between see each other's tokens through `tats`, as if
-- each were its own script.
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

local bucket_count = tonumber(ARGV[1])
local bucket_key, interval, burst = {}, {}, {}
for j = 1, bucket_count do
    bucket_key[j] = tonumber(ARGV[3 * j - 1])
    interval[j] = tonumber(ARGV[3 * j])
    burst[j] = tonumber(ARGV[3 * j + 1])
end
local decisions = ARGV[3 * bucket_count + 2]

-- Per key index: its TAT as the decisions so far left it.
local tats = {}
local written = {}
local order = {}
local replies = {0}
local at = 1
local function next_number()
    local high, low = string.byte(decisions, at, at + 1)
    at = at + 2
    return high * 256 + low
end
while at < #decisions do
    local reply = 0
    for i = 1, next_number() do
        local j = next_number()
        if reply == 0 then
            local key = bucket_key[j]
            local tat = tats[key]
            if tat == nil then
                tat = tonumber(redis.call('GET', KEYS[key]) or '') or now
            end
            if tat < now then
                tat = now
            end
            local new_tat = tat + interval[j]
            local wait = new_tat - now - burst[j] * interval[j]
            if wait > 0 then
                reply = math.min(math.ceil(wait), 2 ^ 48) * 16 + i
                tats[key] = tat
            else
                tats[key] = new_tat
                if not written[key] then
                    written[key] = true
                    order[#order + 1] = key
                end
            end
        end
    end
    replies[1] = replies[1] + 1
    if reply ~= 0 then
        replies[#replies + 1] = replies[1]
        replies[#replies + 1] = reply
    end
end

-- Expire each bucket once it is full again, so idle keys vanish.
for _, key in ipairs(order) do
    local tat = tats[key]
    local ttl_ms = math.ceil((tat - now) / 1000) + 1
    redis.call('SET', KEYS[key], string.format('%.17g', tat), 'PX', string.format('%d', ttl_ms))
end
return replies
