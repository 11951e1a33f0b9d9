-- Stores a new task unless a live-task limit is reached.
-- KEYS: the task, every live task, the caller's live tasks, the caller's tasks,
--       the tasks awaiting approval
-- ARGV: record, record expiry (Unix ms), task expiry (score), creation (score),
--       most live in all, most live per caller, id, live member, most listed,
--       "1" if it awaits approval
-- Returns 1 (stored), 0 (the id exists), -1 (all full), -2 (caller full).
local function extend(key, at)
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local ttl = redis.call('PTTL', key)
  if ttl < 0 or now_ms + ttl < tonumber(at) then
    redis.call('PEXPIREAT', key, at)
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return -1 end
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[6]) then return -2 end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[8])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[7])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[7])
local over = redis.call('ZCARD', KEYS[4]) - tonumber(ARGV[9])
if over > 0 then redis.call('ZREMRANGEBYRANK', KEYS[4], 0, over - 1) end
if ARGV[10] == '1' then redis.call('ZADD', KEYS[5], ARGV[4], ARGV[7]) end
extend(KEYS[3], ARGV[2])
extend(KEYS[4], ARGV[2])
return 1
