-- Writes back a lease a replica kept alive while Redis was away.
-- ARGV: prefix, lease, ttl_ms, instance, endpoint, n, then n (name, descriptor) entries.
-- Returns 'extended' (it was there), 'restored' (re-created, minus tools that
-- now conflict), 'superseded' (the instance has a newer lease) or 'unknown'.
local lease, ttl, inst, endpoint = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
if redis.call('EXISTS', p .. ':lease:' .. lease) == 1 then
  redis.call('ZADD', p .. ':expiry', now_ms() + ttl, lease)
  return 'extended'
end
local n = tonumber(ARGV[6])
if n == 0 then return 'unknown' end
if redis.call('GET', p .. ':inst:' .. inst) then return 'superseded' end
local keep = {}
for _, pair in ipairs(read_pairs(7, n)) do
  if compatible(pair[1], pair[2], inst) then keep[#keep + 1] = pair end
end
local touched = {}
add_lease(lease, inst, endpoint, ttl, keep, touched)
publish(touched)
return 'restored'
