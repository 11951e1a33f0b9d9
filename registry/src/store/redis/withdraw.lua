-- ARGV: prefix, lease. Returns the names of the tools it touched.
local touched = {}
drop_lease(ARGV[2], touched)
publish(touched)
return touched
