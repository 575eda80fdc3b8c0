-- EMQ failures.incr (wire 4). KEYS: active, pending, schedule, dead, base.
-- ARGV: id, token, error, max_attempts, backoff_ms, traceback (optional).
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/due.lua, lib/failure.lua.
-- FAIL's arguments in FAIL's order, and FAIL's move and checks, by FAIL's own code (lib/failure.lua,
-- fail_job), and `dead` on the job's outcome channel whenever it dies, where the caller may
-- publish (docs/spec.md §12).
return fail_job(true)
