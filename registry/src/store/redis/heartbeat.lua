-- ARGV: prefix, lease, ttl_ms. Returns 1 if the lease was extended, 0 if unknown.
if redis.call('EXISTS', p .. ':lease:' .. ARGV[2]) == 0 then return 0 end
redis.call('ZADD', p .. ':expiry', now_ms() + tonumber(ARGV[3]), ARGV[2])
return 1
