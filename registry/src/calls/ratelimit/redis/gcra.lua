-- GCRA: one or more decisions, each over one or more buckets, in order,
-- atomically, on Redis's clock (one call's caller bucket, then its tool
-- bucket; the decisions one serving thread gathered on one tool).
--
-- KEYS       every bucket of every decision, in order: a bucket holds its
--            theoretical arrival time (TAT), in microseconds since the
--            epoch, and is absent when full
-- ARGV       per decision: its bucket count k, then per bucket its emission
--            interval T in microseconds (1e6 / rate; may be fractional) and
--            its burst b (at least 1)
--
-- Each decision takes a token from its buckets in turn, and stops at the
-- first that has none (tokens taken from the buckets before it stay taken).
-- Returns one integer per decision, the cheapest reply to send and parse: 0
-- when the call may go ahead, else retry_after_us * 16 + i: bucket i (at
-- most 15 buckets) refused, and a token is there after retry_after_us,
-- rounded up to the microsecond so that waiting it is always enough, and
-- capped at 2^48 us (about nine years) so that the reply stays exact in a
-- double.
--
-- A bucket that several decisions take from is read once and written once:
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

local tats = {}
local written = {}
local order = {}
local replies = {}
local key = 0
local arg = 1
while arg <= #ARGV do
    local buckets = tonumber(ARGV[arg])
    arg = arg + 1
    local reply = 0
    for i = 1, buckets do
        key = key + 1
        local name = KEYS[key]
        local interval = tonumber(ARGV[arg])
        local burst = tonumber(ARGV[arg + 1])
        arg = arg + 2
        if reply == 0 then
            local tat = tats[name]
            if tat == nil then
                tat = tonumber(redis.call('GET', name) or '') or now
            end
            if tat < now then
                tat = now
            end
            local new_tat = tat + interval
            local wait = new_tat - now - burst * interval
            if wait > 0 then
                reply = math.min(math.ceil(wait), 2 ^ 48) * 16 + i
                tats[name] = tat
            else
                tats[name] = new_tat
                if not written[name] then
                    written[name] = true
                    order[#order + 1] = name
                end
            end
        end
    end
    replies[#replies + 1] = reply
end

-- Expire each bucket once it is full again, so idle keys vanish.
for _, name in ipairs(order) do
    local tat = tats[name]
    local ttl_ms = math.ceil((tat - now) / 1000) + 1
    redis.call('SET', name, string.format('%.17g', tat), 'PX', string.format('%d', ttl_ms))
end
return replies
