-- ARGV: prefix, replica id, window_ms. Marks the replica alive and returns
-- how many replicas were seen within the window.
local now = now_ms()
redis.call('ZADD', p .. ':replicas', now, ARGV[2])
redis.call('ZREMRANGEBYSCORE', p .. ':replicas', '-inf', now - tonumber(ARGV[3]))
return redis.call('ZCARD', p .. ':replicas')
