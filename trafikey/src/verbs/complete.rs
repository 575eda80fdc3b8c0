//! EMQ.COMPLETE: settle a held job; the row is deleted and counted (SPEC §3, §5.2, §5.5).

use valkey_module::{Context, ValkeyResult};

use crate::bus::{self, Events};
use crate::decide::{incr, num, op, owned_op, Cmd, Expect, Op};
use crate::errors::{Refusal, NOT_INTEGER};
use crate::grammar::{self, parse_digits, Argc, Keyspace};
use crate::host::{int, Fence, Host, Seen};
use crate::verbs::{field, held, LeaseCheck, FLAT_NO_FLOW, HELD};

pub const VERB: &str = "EMQ.COMPLETE";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 2;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 2, two ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(2))?;
    // 2. layout: active, base
    let q = grammar::layout(&call, &["active"])?;
    let active = call.keys[0];
    // 3. arguments: id, token
    let id = grammar::id(call.argv[0])?;
    let token = call.argv[1];
    // 4.–5. fence and reads: held, flat, not a flow child
    let h = Host::new(ctx, VERB);
    let fence = h.fence();
    let (row, metrics) = (q.row(id), q.metrics_completed());
    let Some((_, writes, waited)) = completion(
        &h,
        &fence,
        &q,
        (active, &row, &metrics),
        (id, token),
        LeaseCheck::Remove,
        &[],
    )?
    else {
        return Ok(int(0));
    };
    let channel = match waited {
        true => bus::outcome_channel(&fence, &q, id)?,
        false => None,
    };
    // 6.–7. writes, each replicated as its effect; then the outcome, told while the queue has
    // result waiters (a waiter finds no record: completed, no result kept; docs/spec.md §12)
    h.apply(&writes)?;
    if let Some(channel) = channel {
        h.publish(&channel, b"completed")?;
    }
    Ok(int(1))
}

/// Steps 4–5 of a completion (COMPLETE, PUBLISH): the job's own checks ([`job_checks`]), then
/// the queue's for one completion ([`queue_checks`]). `None` (reply 0) when not held; else the
/// row's `HELD` + `extra` fields, the move's writes ([`completion_plan`]), and whether the queue
/// has result waiters.
pub fn completion<'a>(
    h: &Host<'_>,
    fence: &Fence<'_>,
    q: &Keyspace<'_>,
    (active, row, metrics): (&'a [u8], &'a [u8], &'a [u8]),
    (id, token): (&'a [u8], &'a [u8]),
    check: LeaseCheck,
    extra: &[&'static str],
) -> Result<Option<(Seen, Vec<Op<'a>>, bool)>, Refusal> {
    let Some((seen, window)) = job_checks(h, fence, q, (active, row), (id, token), check, extra)?
    else {
        return Ok(None);
    };
    let (count, events, waited) = queue_checks(h, fence, q, metrics, 1)?;
    let job = Settle {
        id,
        token,
        row,
        window,
    };
    let plan = completion_plan(
        Vec::new(),
        (active, metrics),
        (count, b"1"),
        events.as_ref(),
        std::slice::from_ref(&job),
    );
    Ok(Some((seen, plan, waited)))
}

/// One job a completion settles, checked: its id, the token it was held with, its row, and its
/// unique window's writes (none without one).
pub struct Settle<'a> {
    pub id: &'a [u8],
    pub token: &'a [u8],
    pub row: &'a [u8],
    pub window: Vec<Op<'static>>,
}

/// Steps 4–5 of one job's completion, what its own row decides: held with `token` (active
/// asked as the verb's script asks it: `check`), flat, not a flow child; its unique window's
/// marker and `unique` checked; the row writable. `None` (reply 0) when not held; else the
/// row's `HELD` + `extra` fields and the window's writes.
pub fn job_checks(
    h: &Host<'_>,
    fence: &Fence<'_>,
    q: &Keyspace<'_>,
    (active, row): (&[u8], &[u8]),
    (id, token): (&[u8], &[u8]),
    check: LeaseCheck,
    extra: &[&'static str],
) -> Result<Option<(Seen, Vec<Op<'static>>)>, Refusal> {
    let Some(seen) = held(
        h,
        fence,
        row,
        (active, check),
        (id, token),
        FLAT_NO_FLOW,
        extra.iter().chain(&["unique"]),
    )?
    else {
        return Ok(None);
    };
    let window = unique_window(h, fence, q, id, field(&seen, HELD.len() + extra.len()))?;
    fence.write(row)?;
    Ok(Some((seen, window)))
}

/// Steps 4–5 of the queue's side of `n` completions: the completed count predicted (`count +
/// n`, HINCRBY's rules), metrics writable, the queue's events and result waiters read
/// ([`bus::switches`]).
pub fn queue_checks(
    h: &Host<'_>,
    fence: &Fence<'_>,
    q: &Keyspace<'_>,
    metrics: &[u8],
    n: i64,
) -> Result<(i64, Option<Events>, bool), Refusal> {
    fence.read(metrics)?;
    let stored = h.counter(metrics)?;
    let count = incr(stored.as_deref(), n).map_err(Refusal::Counter)?;
    fence.write(metrics)?;
    let (events, waited) = bus::switches(h, fence, q)?;
    Ok((count, events, waited))
}

/// The writes of the completions of `jobs`, in order, added to `plan` (empty): one `ZREM active` of every id, each row's
/// `DEL`, one `HINCRBY metrics:completed count <n>` (`by`, answering `count`), each job's
/// `completed` event when events are on, each job's window. One job's are COMPLETE's; n jobs'
/// leave what n COMPLETEs leave (the count's increments summed, exact: one key, one field).
pub fn completion_plan<'a>(
    mut plan: Vec<Op<'a>>,
    (active, metrics): (&'a [u8], &'a [u8]),
    (count, by): (i64, &'a [u8]),
    events: Option<&Events>,
    jobs: &[Settle<'a>],
) -> Vec<Op<'a>> {
    let per_job = 1 + usize::from(events.is_some()) + 2;
    plan.reserve(2 + jobs.len() * per_job);
    let mut zrem = Vec::with_capacity(1 + jobs.len());
    zrem.push(active);
    zrem.extend(jobs.iter().map(|j| j.id));
    plan.push(op(Cmd::Zrem, &zrem, Expect::Int(jobs.len() as i64)));
    plan.extend(jobs.iter().map(|j| op(Cmd::Del, &[j.row], Expect::Int(1))));
    plan.push(op(
        Cmd::Hincrby,
        &[metrics, b"count", by],
        Expect::Int(count),
    ));
    if let Some(ev) = events {
        plan.extend(jobs.iter().map(|j| ev.op(b"completed", j.id, j.token, &[])));
    }
    plan.extend(jobs.iter().flat_map(|j| j.window.iter().cloned()));
    plan
}

/// A completed row's unique window (docs/spec.md §14): when the row holds `unique` (ms), the
/// marker `unique:<id>` records when it finished and expires that long after, so
/// ENQUEUE.UNIQUE does not admit the id again meanwhile. The marker must be a hash or nothing;
/// `unique` must be an integer.
fn unique_window(
    h: &Host<'_>,
    fence: &Fence<'_>,
    q: &Keyspace<'_>,
    id: &[u8],
    unique: Option<&[u8]>,
) -> Result<Vec<Op<'static>>, Refusal> {
    let Some(unique) = unique else {
        return Ok(Vec::new());
    };
    let ms = parse_digits(unique).ok_or(Refusal::Counter(NOT_INTEGER))?;
    let marker = q.key(&[b"unique:".as_slice(), id].concat());
    fence.read(&marker)?;
    h.expect_hash(&marker)?;
    fence.write(&marker)?;
    let now = h.now_ms()?;
    let until = grammar::at("unique", now, ms)?;
    Ok(vec![
        owned_op(
            Cmd::Hset,
            vec![marker.to_vec(), b"finished".to_vec(), num(now).to_vec()],
            Expect::AnyInt,
        ),
        owned_op(
            Cmd::Pexpireat,
            vec![marker.to_vec(), num(until).to_vec()],
            Expect::Int(1),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(op: &Op<'_>) -> Vec<Vec<u8>> {
        op.args.iter().map(<[u8]>::to_vec).collect()
    }

    fn job<'a>(id: &'a [u8], row: &'a [u8]) -> Settle<'a> {
        Settle {
            id,
            token: b"1",
            row,
            window: Vec::new(),
        }
    }

    #[test]
    fn one_completion_is_completes_writes() {
        let jobs = [job(b"a", b"emq:{q}:job:a")];
        let plan = completion_plan(
            Vec::new(),
            (b"emq:{q}:active", b"emq:{q}:metrics:completed"),
            (7, b"1"),
            None,
            &jobs,
        );
        let cmds: Vec<Cmd> = plan.iter().map(|o| o.cmd).collect();
        assert_eq!(cmds, [Cmd::Zrem, Cmd::Del, Cmd::Hincrby]);
        assert_eq!(args(&plan[0]), [b"emq:{q}:active".to_vec(), b"a".to_vec()]);
        assert_eq!(plan[0].expect, Expect::Int(1));
        assert_eq!(plan[2].expect, Expect::Int(7));
    }

    #[test]
    fn n_completions_leave_one_set_removal_and_one_count_of_n() {
        let rows: Vec<Vec<u8>> = (0..20)
            .map(|i| format!("emq:{{q}}:job:{i}").into_bytes())
            .collect();
        let ids: Vec<Vec<u8>> = (0..20).map(|i| format!("{i}").into_bytes()).collect();
        let mut jobs: Vec<Settle> = ids
            .iter()
            .zip(&rows)
            .map(|(id, row)| job(id, row))
            .collect();
        let marker = b"emq:{q}:unique:3".to_vec();
        jobs[3].window = vec![owned_op(
            Cmd::Hset,
            vec![marker, b"finished".to_vec(), b"5".to_vec()],
            Expect::AnyInt,
        )];
        let plan = completion_plan(
            Vec::new(),
            (b"emq:{q}:active", b"emq:{q}:metrics:completed"),
            (20, b"20"),
            None,
            &jobs,
        );
        // one ZREM of every id, in order; each row's DEL; one HINCRBY by 20; the window last
        assert_eq!(plan.len(), 1 + 20 + 1 + 1);
        let mut zrem = vec![b"emq:{q}:active".to_vec()];
        zrem.extend(ids.iter().cloned());
        assert_eq!(args(&plan[0]), zrem);
        assert_eq!(plan[0].expect, Expect::Int(20));
        for (op, row) in plan[1..21].iter().zip(&rows) {
            assert_eq!((op.cmd, args(op)), (Cmd::Del, vec![row.clone()]));
        }
        assert_eq!(
            args(&plan[21]),
            [
                b"emq:{q}:metrics:completed".to_vec(),
                b"count".to_vec(),
                b"20".to_vec()
            ]
        );
        assert_eq!(plan[21].expect, Expect::Int(20));
        assert_eq!(args(&plan[22])[0], b"emq:{q}:unique:3".to_vec());
    }
}
