//! EMQ.PUBLISH: complete a held job and publish its outcome, in one step: COMPLETE's move,
//! (its `completed` event included), then the completed record with the handler's result
//! (kept `retention_ms`: the job's field of `done`, or `done:<id>` under `meta results record`)
//! and `completed` on the job's outcome channel (docs/spec.md §12).

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use std::borrow::Cow;
use std::ops::Range;

use crate::decide::{num, op, pack_record, Args, Cmd, Expect, Layout, Op};
use crate::errors::Refusal;
use crate::ffi::Kind;
use crate::grammar::{self, Argc, KeyName, Keyspace};
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
    let (row, metrics) = (q.row(id), q.metrics_completed());
    let done: KeyName; // the record's key, in the queue's layout
    let mut value = Vec::new(); // the record as its field's value
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
        let layout = bus::results_layout(&h, &fence, &q)?;
        done = record_key(&q, layout, id);
        match done_checks(&h, &fence, layout, &done)? {
            Kept::Field => {
                pack(&mut value, token, &finished, &seen, result);
                plan.push(fields_write(
                    &done,
                    &expires,
                    [(id, &value[..])].into_iter(),
                ))
            }
            Kept::Record { older } => record_writes(
                &mut plan,
                (&done, older),
                (token, result),
                (&finished, &expires),
                &seen,
            ),
        }
    }
    let channel = bus::outcome_channel(&fence, &q, id)?;
    // 6.–7. writes, each replicated as its effect; then the outcome, told
    h.apply(&plan)?;
    if let Some(channel) = channel {
        h.publish(&channel, b"completed")?;
    }
    Ok(int(1))
}

/// The key a job's completed record is written to in `layout`: the queue's `done` (its field),
/// or `done:<id>`.
pub fn record_key(q: &Keyspace<'_>, layout: Layout, id: &[u8]) -> KeyName {
    match layout {
        Layout::Fields => q.done_fields(),
        Layout::Record => q.done(id),
    }
}

/// What a completed record is written over, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// A field of `done` (written again, a field loses its older value and expiry: no DEL).
    Field,
    /// `done:<id>`; `older`: a record of the same id is there (it goes whole first).
    Record { older: bool },
}

/// Step 5 of keeping a job's completed record (retention above 0) at `key` ([`record_key`] of
/// `layout`): readable, a hash or nothing (else `WRONGTYPE`), writable.
pub fn done_checks(
    h: &Host<'_>,
    fence: &Fence<'_>,
    layout: Layout,
    key: &[u8],
) -> Result<Kept, Refusal> {
    fence.read(key)?;
    let kind = h.kind(key)?;
    if !matches!(kind, Kind::Empty | Kind::Hash) {
        return Err(Refusal::WrongType);
    }
    fence.write(key)?;
    Ok(match layout {
        Layout::Fields => Kept::Field,
        Layout::Record => Kept::Record {
            older: kind == Kind::Hash,
        },
    })
}

/// A job's record as its field's value, added to `into`: the attempts (`token`), when it
/// `finished`, the row's `created` and `started` (`seen` after `HELD`), the result. Answers
/// where in `into` it lies.
pub fn pack(
    into: &mut Vec<u8>,
    token: &[u8],
    finished: &[u8],
    seen: &Seen,
    result: &[u8],
) -> Range<usize> {
    let (n, start) = (HELD.len(), into.len());
    pack_record(
        into,
        token,
        finished,
        (field(seen, n), field(seen, n + 1)),
        result,
    );
    start..into.len()
}

/// The records (id, packed value) as fields of `done`, every one expiring at `expires`: one
/// `HSETEX done PXAT <expires> FIELDS n id1 v1 …` (a batch shares its deadline).
pub fn fields_write<'a>(
    done: &'a [u8],
    expires: &'a [u8],
    records: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])>,
) -> Op<'a> {
    let mut args: Vec<Cow<'a, [u8]>> = Vec::with_capacity(5 + 2 * records.len());
    args.extend([
        Cow::Borrowed(done),
        Cow::Borrowed(b"PXAT".as_slice()),
        Cow::Borrowed(expires),
        Cow::Borrowed(b"FIELDS".as_slice()),
        Cow::Owned(num(records.len() as i64).to_vec()),
    ]);
    for (id, value) in records {
        args.extend([Cow::Borrowed(id), Cow::Borrowed(value)]);
    }
    Op {
        cmd: Cmd::Hsetex,
        args: Args::Many(args),
        expect: Expect::Int(1),
    }
}

/// The record `done:<id>`'s writes, added to `plan`: an `older` record goes whole, then the
/// result, the attempts (`token`), when it finished, and the row's `created` and `started`
/// (`seen` after `HELD`) when it had them; expiring at `expires`.
pub fn record_writes<'a>(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_of_records_is_one_hsetex_with_one_deadline() {
        let records: [(&[u8], &[u8]); 2] = [(b"a", b"1,5,,,ra"), (b"b", b"2,5,3,4,r,b")];
        let write = fields_write(b"emq:{q}:done", b"60005", records.into_iter());
        assert_eq!(write.cmd, Cmd::Hsetex);
        assert_eq!(write.expect, Expect::Int(1));
        let args: Vec<&[u8]> = write.args.iter().collect();
        let want: [&[u8]; 9] = [
            b"emq:{q}:done",
            b"PXAT",
            b"60005",
            b"FIELDS",
            b"2",
            b"a",
            b"1,5,,,ra",
            b"b",
            b"2,5,3,4,r,b",
        ];
        assert_eq!(args, want);
    }
}
