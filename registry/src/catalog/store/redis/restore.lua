-- Writes back a lease a replica kept alive while Redis was away.
-- ARGV: prefix, lease, ttl_ms, instance, endpoint, owner, n, then n (name,
-- descriptor) entries. Returns 'extended' (it was there), 'restored'
-- (re-created, minus tools that now conflict or another registrant holds),
-- 'superseded' (the instance has a newer lease), 'denied' (another
-- registrant holds the lease) or 'unknown'.
local lease, ttl, inst, endpoint, owner = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6]
local held = lease_owner(lease)
if held then
  if held ~= owner then return 'denied' end
  redis.call('ZADD', p .. ':expiry', now_ms() + ttl, lease)
  return 'extended'
end
local n = tonumber(ARGV[7])
if n == 0 then return 'unknown' end
if redis.call('GET', p .. ':inst:' .. inst) then return 'superseded' end
local keep = {}
for _, pair in ipairs(read_pairs(8, n)) do
  if owns(pair[1], owner) and compatible(pair[1], pair[2], inst) then keep[#keep + 1] = pair end
end
local touched = {}
add_lease(lease, inst, endpoint, ttl, keep, touched, owner)
publish(touched)
return 'restored'
