-- ARGV: prefix, lease, ttl_ms, owner. Returns 1 if the lease was extended,
-- 0 if unknown, -1 if another registrant holds it.
local owner = lease_owner(ARGV[2])
if not owner then return 0 end
if owner ~= ARGV[4] then return -1 end
redis.call('ZADD', p .. ':expiry', now_ms() + tonumber(ARGV[3]), ARGV[2])
return 1
