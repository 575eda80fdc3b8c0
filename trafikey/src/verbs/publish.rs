//! EMQ.PUBLISH: complete a held job and publish its outcome, in one step: COMPLETE's move,
//! (its `completed` event included), then the completed record with the handler's result
//! (kept `retention_ms`) and `completed` on the job's outcome channel (docs/spec.md §12).

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use crate::decide::{num, op, Cmd, Expect, Op};
use crate::errors::Refusal;
use crate::ffi::Kind;
use crate::grammar::{self, Argc};
use crate::host::{int, Fence, Host, Seen};
use crate::verbs::{complete::completion, field, LeaseCheck, HELD};

pub const VERB: &str = "EMQ.PUBLISH";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 2;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 2, four ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(4))?;
    // 2. layout: active, base
    let q = grammar::layout(&call, &["active"])?;
    let active = call.keys[0];
    // 3. arguments: id, token, result (bytes), retention_ms
    let id = grammar::id(call.argv[0])?;
    let token = call.argv[1];
    let result = call.argv[2];
    let retention = grammar::retention(call.argv[3])?;
    let h = Host::new(ctx, VERB);
    let now = h.now_ms()?;
    let (finished, expires) = (num(now), num(grammar::at("retention_ms", now, retention)?));
    // 4.–5. fence and reads: COMPLETE's, then the record, the events and the channel
    let fence = h.fence();
    let (row, metrics, done) = (q.row(id), q.metrics_completed(), q.done(id));
    let Some((seen, mut plan, _)) = completion(
        &h,
        &fence,
        &q,
        (active, &row, &metrics),
        (id, token),
        LeaseCheck::Score,
        &["created", "started"],
    )?
    else {
        return Ok(int(0));
    };
    if retention > 0 {
        let older = done_checks(&h, &fence, &done)?;
        done_writes(
            &mut plan,
            (&done, older),
            (token, result),
            (&finished, &expires),
            &seen,
        );
    }
    let channel = bus::outcome_channel(&fence, &q, id)?;
    // 6.–7. writes, each replicated as its effect; then the outcome, told
    h.apply(&plan)?;
    if let Some(channel) = channel {
        h.publish(&channel, b"completed")?;
    }
    Ok(int(1))
}

/// Step 5 of keeping a job's completed record `done` (retention above 0): readable, a hash or
/// nothing (else `WRONGTYPE`), writable. Whether an older record is there.
pub fn done_checks(h: &Host<'_>, fence: &Fence<'_>, done: &[u8]) -> Result<bool, Refusal> {
    fence.read(done)?;
    let kind = h.kind(done)?;
    if !matches!(kind, Kind::Empty | Kind::Hash) {
        return Err(Refusal::WrongType);
    }
    fence.write(done)?;
    Ok(kind == Kind::Hash)
}

/// The completed record's writes, added to `plan`: an `older` record goes whole, then the result,
/// the attempts (`token`), when it finished, and the row's `created` and `started` (`seen` after
/// `HELD`) when it had them; expiring at `expires`.
pub fn done_writes<'a>(
    plan: &mut Vec<Op<'a>>,
    (done, older): (&'a [u8], bool),
    (token, result): (&'a [u8], &'a [u8]),
    (finished, expires): (&'a [u8], &'a [u8]),
    seen: &'a Seen,
) {
    if older {
        // an older record of the same id (completed before, enqueued again) goes whole
        plan.push(op(Cmd::Del, &[done], Expect::Int(1)));
    }
    let n = HELD.len();
    let mut record: Vec<&[u8]> = vec![
        done,
        b"result",
        result,
        b"attempts",
        token,
        b"finished",
        finished,
    ];
    for (name, at) in [(b"created".as_slice(), n), (b"started".as_slice(), n + 1)] {
        if let Some(value) = field(seen, at) {
            record.extend([name, value]);
        }
    }
    plan.push(op(Cmd::Hset, &record, Expect::AnyInt));
    plan.push(op(Cmd::Pexpireat, &[done, expires], Expect::Int(1)));
}
