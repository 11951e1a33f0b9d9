-- ARGV: prefix, instance, endpoint, lease, ttl_ms, max_instances, max_tools,
--       owner, owner_max (0: none), owner_max_tools (0: none), n, then n
--       (name, descriptor) entries.
-- Returns {'ok', touched...} | {'conflict', name, live_descriptor} |
-- {'full', what} | {'denied', 'instance'|'tool', name} | {'owner_full'} |
-- {'owner_tools_full'}.
local inst, endpoint, lease = ARGV[2], ARGV[3], ARGV[4]
local ttl, max_inst, max_tools = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local owner, owner_max, owner_max_tools = ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10])
local entries = read_pairs(12, tonumber(ARGV[11]))
local old = redis.call('GET', p .. ':inst:' .. inst)
if old and (lease_owner(old) or owner) ~= owner then
  return { 'denied', 'instance', inst }
end
for _, pair in ipairs(entries) do
  if not owns(pair[1], owner) then return { 'denied', 'tool', pair[1] } end
end
for _, pair in ipairs(entries) do
  local ok, live = compatible(pair[1], pair[2], inst)
  if not ok then return { 'conflict', pair[1], live } end
end
if not old and owner_max > 0 and redis.call('SCARD', p .. ':held:' .. owner) >= owner_max then
  return { 'owner_full' }
end
if not old and redis.call('ZCARD', p .. ':expiry') >= max_inst then
  return { 'full', 'instances' }
end
-- Tools only the old lease serves, and that this announce drops, leave
-- with it: they do not count against the bounds.
local freed = 0
if old then
  local announced = {}
  for _, pair in ipairs(entries) do announced[pair[1]] = true end
  local names = redis.call('HGET', p .. ':lease:' .. old, 'tools') or ''
  for name in string.gmatch(names, '[^\n]+') do
    if not announced[name] and redis.call('HLEN', p .. ':tool:' .. name .. ':inst') <= 1 then
      freed = freed + 1
    end
  end
end
local new, new_owned = 0, 0
for _, pair in ipairs(entries) do
  if redis.call('SISMEMBER', p .. ':tools', pair[1]) == 0 then new = new + 1 end
  if redis.call('SISMEMBER', p .. ':owned:' .. owner, pair[1]) == 0 then new_owned = new_owned + 1 end
end
if owner_max_tools > 0 and redis.call('SCARD', p .. ':owned:' .. owner) - freed + new_owned > owner_max_tools then
  return { 'owner_tools_full' }
end
if redis.call('SCARD', p .. ':tools') - freed + new > max_tools then
  return { 'full', 'tools' }
end
local touched = {}
if old then drop_lease(old, touched) end
add_lease(lease, inst, endpoint, ttl, entries, touched, owner)
publish(touched)
local reply = { 'ok' }
for _, name in ipairs(touched) do reply[#reply + 1] = name end
return reply
