-- EMQ state (a declared read). KEYS: base. ARGV: id. Reply: the row's state, or nil.
return redis.call('HGET', KEYS[1] .. 'job:' .. ARGV[1], 'state')
