//! EMQ.FAIL: a held job failed; retry it (pending or schedule) or dead-letter it, capped on
//! `failures` (SPEC §3, §5.2, §5.3, §5.7); the `failed` event, then `retried` or `dead`, when
//! the queue's events are on. An optional sixth argument, the failure's traceback (token
//! `fail.traceback`, docs/spec.md §11.6), is written in the same HSET. A death is told on the
//! job's outcome channel while the queue has result waiters. EMQ.FAILURES.INCR runs the same
//! move, with the same arguments, and always tells a death (`failures_incr.rs`).

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use crate::decide::{earlier, fail_budget, incr, num, op, priority, Budget, Cmd, Expect};
use crate::errors::Refusal;
use crate::grammar::{self, Argc};
use crate::host::{bulk, int, Host};
use crate::verbs::{field, held, LeaseCheck, FLAT_NO_FLOW, HELD};

pub const VERB: &str = "EMQ.FAIL";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 5;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    settle(ctx, args, VERB, false)
}

/// FAIL's move for `verb`, and `dead` on the job's outcome channel when it dies: with `bus`
/// always, else while the queue has result waiters.
pub fn settle(ctx: &Context, args: &[&[u8]], verb: &'static str, bus: bool) -> ValkeyResult {
    // 1. shape: numkeys 5, five ARGV and the optional traceback
    let call = grammar::shape(verb, args, NUMKEYS, Argc::Late(5, 1))?;
    // 2. layout: active, pending, schedule, dead, base
    let q = grammar::layout(&call, &["active", "pending", "schedule", "dead"])?;
    let (active, pending, schedule, dead) =
        (call.keys[0], call.keys[1], call.keys[2], call.keys[3]);
    // 3. arguments: id, token, error (bytes), max_attempts, backoff_ms[, traceback (bytes)]
    let id = grammar::id(call.argv[0])?;
    let token = call.argv[1];
    let error = grammar::error(call.argv[2])?;
    let max_attempts = grammar::budget("max_attempts", call.argv[3])?;
    let backoff = grammar::delay("backoff_ms", call.argv[4])?;
    let traceback = call
        .argv
        .get(5)
        .map(|t| grammar::traceback(t))
        .transpose()?;
    let h = Host::new(ctx, verb);
    let now = h.now_ms()?;
    let due = grammar::at("backoff_ms", now, backoff)?;
    let failed = num(now);
    // 4.–5. fence and reads: held, flat, not a flow child (a dead row is not active: a
    // repeated terminal FAIL writes nothing)
    let fence = h.fence();
    let row = q.row(id);
    let Some(seen) = held(
        &h,
        &fence,
        &row,
        (active, LeaseCheck::Score),
        (id, token),
        FLAT_NO_FLOW,
        &["failures", "priority"],
    )?
    else {
        return Ok(int(0));
    };
    let n = HELD.len();
    let (failures, verdict) =
        fail_budget(field(&seen, n), max_attempts, backoff).map_err(Refusal::Counter)?;
    let failures = num(failures);
    let (target, score) = match verdict {
        Budget::Pending => (
            pending,
            priority(field(&seen, n + 1)).map_err(Refusal::Counter)?,
        ),
        Budget::Scheduled => (schedule, due),
        // the dead score is the time it died (SPEC §9, purge by age)
        Budget::Dead => (dead, now),
    };
    h.expect_zset(target)?;
    // what a blocked BCLAIM must hear: pending gained a job, or the next due time moved earlier
    let wake = match verdict {
        Budget::Pending => Some(pending),
        Budget::Scheduled => earlier(due, h.first_score(schedule)?).then_some(schedule),
        Budget::Dead => None,
    };
    let score = num(score);
    let mut fields: Vec<&[u8]> = vec![
        &row,
        b"state",
        verdict.state(),
        b"last_error",
        error,
        b"failures",
        &failures,
        b"failed",
        &failed,
    ];
    if let Some(tb) = traceback {
        fields.extend([b"traceback".as_slice(), tb]);
    }
    let mut plan = vec![
        op(Cmd::Zrem, &[active, id], Expect::Int(1)),
        op(Cmd::Zadd, &[target, &score, id], Expect::AnyInt),
        op(Cmd::Hset, &fields, Expect::AnyInt),
    ];
    let metrics = q.metrics_failed();
    if verdict == Budget::Dead {
        fence.read(&metrics)?;
        let stored = h.counter(&metrics)?;
        let count = incr(stored.as_deref(), 1).map_err(Refusal::Counter)?;
        fence.write(&metrics)?;
        plan.push(op(
            Cmd::Hincrby,
            &[&metrics, b"count", b"1"],
            Expect::Int(count),
        ));
    }
    fence.write(&row)?;
    let (events, waited) = bus::switches(&h, &fence, &q)?;
    if let Some(ev) = events {
        plan.push(ev.op(b"failed", id, token, &[b"error", error]));
        let next: &[u8] = match verdict {
            Budget::Dead => b"dead",
            _ => b"retried",
        };
        plan.push(ev.op(next, id, token, &[b"state", verdict.state()]));
    }
    let channel = match verdict {
        Budget::Dead if bus || waited => bus::outcome_channel(&fence, &q, id)?,
        _ => None,
    };
    // 6.–7. writes, each replicated as its effect; then a death, told
    h.apply(&plan)?;
    if let Some(key) = wake {
        h.signal(key);
    }
    if let Some(channel) = channel {
        h.publish(&channel, b"dead")?;
    }
    Ok(bulk(verdict.state()))
}
