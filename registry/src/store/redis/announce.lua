-- ARGV: prefix, instance, endpoint, lease, ttl_ms, max_instances, max_tools,
--       n, then n (name, descriptor) entries.
-- Returns {'ok', touched...} | {'conflict', name, live_descriptor} | {'full', what}.
local inst, endpoint, lease = ARGV[2], ARGV[3], ARGV[4]
local ttl, max_inst, max_tools = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local entries = read_pairs(9, tonumber(ARGV[8]))
for _, pair in ipairs(entries) do
  local ok, live = compatible(pair[1], pair[2], inst)
  if not ok then return { 'conflict', pair[1], live } end
end
local old = redis.call('GET', p .. ':inst:' .. inst)
if not old and redis.call('ZCARD', p .. ':expiry') >= max_inst then
  return { 'full', 'instances' }
end
local new = 0
for _, pair in ipairs(entries) do
  if redis.call('SISMEMBER', p .. ':tools', pair[1]) == 0 then new = new + 1 end
end
if redis.call('SCARD', p .. ':tools') + new > max_tools then
  return { 'full', 'tools' }
end
local touched = {}
if old then drop_lease(old, touched) end
add_lease(lease, inst, endpoint, ttl, entries, touched)
publish(touched)
local reply = { 'ok' }
for _, name in ipairs(touched) do reply[#reply + 1] = name end
return reply
