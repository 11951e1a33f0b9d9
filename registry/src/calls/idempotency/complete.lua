-- Stores a call's outcome, if its claim still holds the key.
-- KEYS[1]: the key's record.
-- ARGV[1]: the claim's token; ARGV[2]: the completed record;
-- ARGV[3]: how long to keep it (ms).
-- Returns 1 when stored, 0 when the claim no longer holds the key.
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
if current == ARGV[2] then
  -- A retry of a completion that went through.
  return 1
end
local ok, record = pcall(cjson.decode, current)
if not ok or type(record) ~= 'table' or record.token ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
