-- Writes a changed task if no other write came since it was read.
-- KEYS: the task, every live task, the caller's live tasks, the caller's tasks,
--       the tasks awaiting approval
-- ARGV: revision read, record, record expiry (Unix ms), "1" if it is over,
--       id, live member, "1" if it awaits approval
-- Returns 1 (written), 0 (changed meanwhile: read again), -1 (gone).
local current = redis.call('GET', KEYS[1])
if not current then return -1 end
if tonumber(cjson.decode(current)['revision']) ~= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
if ARGV[4] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[6])
  redis.call('ZREM', KEYS[3], ARGV[5])
end
if ARGV[7] ~= '1' then redis.call('ZREM', KEYS[5], ARGV[5]) end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local ttl = redis.call('PTTL', KEYS[4])
if ttl < 0 or now_ms + ttl < tonumber(ARGV[3]) then
  redis.call('PEXPIREAT', KEYS[4], ARGV[3])
end
return 1
