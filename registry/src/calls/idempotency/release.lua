-- Frees an idempotency key, if the claim still holds it.
-- KEYS[1]: the key's record; ARGV[1]: the claim's token.
-- Returns 1 when freed, 0 when the claim no longer held the key.
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
local ok, record = pcall(cjson.decode, current)
if not ok or type(record) ~= 'table' or record.token ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
