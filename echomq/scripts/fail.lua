-- EMQ fail (wire 4). KEYS: active, pending, schedule, dead, base.
-- ARGV: id, token, error, max_attempts, backoff_ms, traceback (optional).
-- Loaded after lib/clock.lua, lib/events.lua, lib/held.lua, lib/pending.lua, lib/due.lua, lib/failure.lua.
-- FAIL's move, written once for FAIL and FAILURES.INCR (lib/failure.lua, fail_job): the budget
-- (SPEC §9.1), the error, time and traceback recorded (docs/spec.md §11.6), the events, the wake
-- marker; a death is told on the job's outcome channel while the queue has result waiters.
return fail_job(false)
