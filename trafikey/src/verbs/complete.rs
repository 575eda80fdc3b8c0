//! EMQ.COMPLETE: settle a held job; the row is deleted and counted (SPEC §3, §5.2, §5.5).

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use crate::decide::{incr, op, Expect, Op};
use crate::errors::Refusal;
use crate::grammar::{self, Argc, Keyspace};
use crate::host::{int, Fence, Host, Seen};
use crate::verbs::{held, FLAT_NO_FLOW};

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
    let Some((_, writes)) = completion(&h, &fence, &q, (active, &row, &metrics), (id, token), &[])?
    else {
        return Ok(int(0));
    };
    // 6.–7. writes, each replicated as its effect
    h.apply(&writes)?;
    Ok(int(1))
}

/// Steps 4–5 of a completion (COMPLETE, PUBLISH): the job held with `token`, flat, not a
/// flow child; the completed count predicted; the queue's events read. `None` (reply 0) when
/// not held; else the row's `HELD` + `extra` fields and the move's writes: `ZREM active id`,
/// `DEL row`, `HINCRBY metrics:completed count 1`, and the `completed` event when events are on.
pub fn completion<'a>(
    h: &Host<'_>,
    fence: &Fence<'_>,
    q: &Keyspace<'_>,
    (active, row, metrics): (&'a [u8], &'a [u8], &'a [u8]),
    (id, token): (&'a [u8], &[u8]),
    extra: &[&str],
) -> Result<Option<(Seen, Vec<Op<'a>>)>, Refusal> {
    let Some(seen) = held(h, fence, row, active, (id, token), FLAT_NO_FLOW, extra)? else {
        return Ok(None);
    };
    fence.read(metrics)?;
    let stored = h
        .hash(metrics, &["count"])?
        .and_then(|m| m.into_iter().next().flatten());
    let count = incr(stored.as_deref(), 1).map_err(Refusal::Counter)?;
    fence.write(row)?;
    fence.write(metrics)?;
    let events = bus::events(h, fence, q)?;
    #[allow(unused_mut)]
    let mut writes = vec![
        op("ZREM", &[active, id], Expect::Int(1)),
        op("DEL", &[row], Expect::Int(1)),
        op("HINCRBY", &[metrics, b"count", b"1"], Expect::Int(count)),
    ];
    // planted (settle): the completion is not counted
    #[cfg(feature = "planted")]
    if crate::plant::on("complete.no_metric") {
        writes.pop();
    }
    writes.extend(events.map(|ev| ev.op(b"completed", id, token, &[])));
    Ok(Some((seen, writes)))
}
