-- ARGV: prefix, lease, owner. Returns {'denied'} if another registrant holds
-- the lease, else {'ok', names of the tools it touched...}.
local owner = lease_owner(ARGV[2])
if owner and owner ~= ARGV[3] then return { 'denied' } end
local touched = {}
drop_lease(ARGV[2], touched)
publish(touched)
local reply = { 'ok' }
for _, name in ipairs(touched) do reply[#reply + 1] = name end
return reply
