//! EMQ.COMPLETE: settle a held job; the row is deleted and counted (SPEC §3, §5.2, §5.5).

use valkey_module::{Context, ValkeyResult};

use crate::bus;
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

/// Steps 4–5 of a completion (COMPLETE, PUBLISH): the job held with `token` (active asked as
/// the verb's script asks it: `check`), flat, not a flow child; the completed count
/// predicted; the queue's events read. `None` (reply 0) when not held; else the row's `HELD` +
/// `extra` fields, the move's writes (`ZREM active id`, `DEL row`, `HINCRBY metrics:completed
/// count 1`, and the `completed` event when events are on), and whether the queue has result
/// waiters.
pub fn completion<'a>(
    h: &Host<'_>,
    fence: &Fence<'_>,
    q: &Keyspace<'_>,
    (active, row, metrics): (&'a [u8], &'a [u8], &'a [u8]),
    (id, token): (&'a [u8], &[u8]),
    check: LeaseCheck,
    extra: &[&str],
) -> Result<Option<(Seen, Vec<Op<'a>>, bool)>, Refusal> {
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
    fence.read(metrics)?;
    let stored = h.counter(metrics)?;
    let count = incr(stored.as_deref(), 1).map_err(Refusal::Counter)?;
    fence.write(row)?;
    fence.write(metrics)?;
    let (events, waited) = bus::switches(h, fence, q)?;
    #[allow(unused_mut)]
    let mut writes = vec![
        op(Cmd::Zrem, &[active, id], Expect::Int(1)),
        op(Cmd::Del, &[row], Expect::Int(1)),
        op(Cmd::Hincrby, &[metrics, b"count", b"1"], Expect::Int(count)),
    ];
    // planted (settle): the completion is not counted
    #[cfg(feature = "planted")]
    if crate::plant::on("complete.no_metric") {
        writes.pop();
    }
    writes.extend(events.map(|ev| ev.op(b"completed", id, token, &[])));
    writes.extend(window);
    Ok(Some((seen, writes, waited)))
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
