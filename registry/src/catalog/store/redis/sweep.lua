-- ARGV: prefix, limit. Drops up to `limit` leases whose time has passed (by
-- Redis's clock); returns their ids.
local due = redis.call('ZRANGEBYSCORE', p .. ':expiry', '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[2]))
local touched = {}
for _, lease in ipairs(due) do drop_lease(lease, touched) end
publish(touched)
return due
