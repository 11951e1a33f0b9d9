-- Claims an idempotency key, or reports who holds it.
-- KEYS[1]: the key's record.
-- ARGV[1]: the in-progress record to set; ARGV[2]: how long it may live (ms).
-- Returns {1, ""} when claimed, else {0, the record that holds the key}.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, ''}
end
return {0, redis.call('GET', KEYS[1]) or ''}
