-- Shared by every catalog script. All keys live under the hash tag in
-- ARGV[1] (e.g. "{toolmesh}"), so on Redis Cluster every script touches one
-- slot. Times come from Redis's own clock.
local p = ARGV[1]

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The tool name of a catalog key (`weather@1.4.2` -> `weather`).
local function family_of(key)
  return string.match(key, '^[^@]+') or key
end

-- Removes a lease and detaches its instance from its tools, appending the
-- names of the tools it touched to `touched`.
local function drop_lease(lease, touched)
  local key = p .. ':lease:' .. lease
  local inst = redis.call('HGET', key, 'instance')
  local tools = redis.call('HGET', key, 'tools')
  local owner = redis.call('HGET', key, 'owner') or ''
  redis.call('DEL', key)
  redis.call('ZREM', p .. ':expiry', lease)
  if not inst then return end
  redis.call('SREM', p .. ':held:' .. owner, lease)
  if redis.call('GET', p .. ':inst:' .. inst) == lease then
    redis.call('DEL', p .. ':inst:' .. inst)
  end
  if tools and tools ~= '' then
    for name in string.gmatch(tools, '[^\n]+') do
      local ikey = p .. ':tool:' .. name .. ':inst'
      redis.call('HDEL', ikey, inst)
      if redis.call('HLEN', ikey) == 0 then
        redis.call('DEL', p .. ':tool:' .. name, ikey, p .. ':tool:' .. name .. ':owner')
        redis.call('SREM', p .. ':tools', name)
        redis.call('SREM', p .. ':owned:' .. owner, name)
        redis.call('SREM', p .. ':versions:' .. family_of(name), name)
      end
      touched[#touched + 1] = name
    end
  end
end

-- The registrant holding a lease ('' for open registration); nil if the
-- lease is unknown.
local function lease_owner(lease)
  local key = p .. ':lease:' .. lease
  if redis.call('EXISTS', key) == 0 then return nil end
  return redis.call('HGET', key, 'owner') or ''
end

-- Whether `owner` may add an instance of the tool version keyed `name`
-- (`name@version`): nobody holds it or another version of its name, or
-- `owner` does.
local function owns(name, owner)
  local family = family_of(name)
  for _, key in ipairs(redis.call('SMEMBERS', p .. ':versions:' .. family)) do
    local other = redis.call('GET', p .. ':tool:' .. key .. ':owner')
    if other and other ~= owner then return false end
  end
  local bare = redis.call('GET', p .. ':tool:' .. family .. ':owner')
  if bare and bare ~= owner then return false end
  local held = redis.call('GET', p .. ':tool:' .. name .. ':owner')
  if held then return held == owner end
  return redis.call('EXISTS', p .. ':tool:' .. name) == 0 or owner == ''
end

-- Whether `desc` may be announced for `name` by `inst`: no live descriptor,
-- the same one, or only `inst` serves it.
local function compatible(name, desc, inst)
  local live = redis.call('GET', p .. ':tool:' .. name)
  if not live or live == desc then return true, live end
  for _, id in ipairs(redis.call('HKEYS', p .. ':tool:' .. name .. ':inst')) do
    if id ~= inst then return false, live end
  end
  return true, live
end

-- Creates `lease` for `inst`, held by `owner`, serving the tools in
-- `entries` (name, descriptor).
local function add_lease(lease, inst, endpoint, ttl, entries, touched, owner)
  local names = {}
  for _, pair in ipairs(entries) do
    local name, desc = pair[1], pair[2]
    redis.call('SET', p .. ':tool:' .. name, desc)
    redis.call('SET', p .. ':tool:' .. name .. ':owner', owner)
    redis.call('HSET', p .. ':tool:' .. name .. ':inst', inst, endpoint)
    redis.call('SADD', p .. ':tools', name)
    redis.call('SADD', p .. ':owned:' .. owner, name)
    redis.call('SADD', p .. ':versions:' .. family_of(name), name)
    names[#names + 1] = name
    touched[#touched + 1] = name
  end
  redis.call('HSET', p .. ':lease:' .. lease, 'instance', inst, 'endpoint', endpoint,
    'tools', table.concat(names, '\n'), 'owner', owner, 'since', now_ms())
  redis.call('SADD', p .. ':held:' .. owner, lease)
  redis.call('SET', p .. ':inst:' .. inst, lease)
  redis.call('ZADD', p .. ':expiry', now_ms() + ttl, lease)
end

local function publish(touched)
  for _, name in ipairs(touched) do
    redis.call('PUBLISH', p .. ':events', name)
  end
end

local function read_pairs(first, n)
  local entries = {}
  for i = 0, n - 1 do
    entries[#entries + 1] = { ARGV[first + 2 * i], ARGV[first + 1 + 2 * i] }
  end
  return entries
end
