//! EMQ.CANCEL: revoke an active job's lease from outside: the job goes dead with
//! `last_error cancelled`, so its holder's next renewal answers 0 and its settle is refused
//! (SPEC §9, docs/spec.md "Control verbs").

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use crate::decide::{incr, num, op, Cmd, Expect};
use crate::errors::Refusal;
use crate::grammar::{self, Argc};
use crate::host::{int, Host};
use crate::state::State;
use crate::verbs::{boundary, expect_state, field, FLAT_NO_FLOW};

pub const VERB: &str = "EMQ.CANCEL";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 3;
/// The `last_error` a cancelled job carries.
pub const CANCELLED: &[u8] = b"cancelled";

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 3, one ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(1))?;
    // 2. layout: active, dead, base
    let q = grammar::layout(&call, &["active", "dead"])?;
    let (active, dead) = (call.keys[0], call.keys[1]);
    // 3. arguments: id
    let id = grammar::id(call.argv[0])?;
    let h = Host::new(ctx, VERB);
    let now = num(h.now_ms()?); // the dead score and the row's `failed` time
                                // 4.–5. fence and reads: no row answers 0; flat, not a flow child; active and in active
    let fence = h.fence();
    let row = q.row(id);
    fence.read(&row)?;
    let Some(seen) = h.hash(&row, &["state", "group", "parent", "attempts"])? else {
        return Ok(int(0));
    };
    boundary(FLAT_NO_FLOW, field(&seen, 1), field(&seen, 2))?;
    expect_state(VERB, field(&seen, 0), State::Active)?;
    if !h.in_zset(active, id)? {
        return Err(Refusal::State(format!("{VERB} id is not in active")).into());
    }
    h.expect_zset(dead)?;
    let metrics = q.metrics_failed();
    fence.read(&metrics)?;
    let stored = h.counter(&metrics)?;
    let count = incr(stored.as_deref(), 1).map_err(Refusal::Counter)?;
    fence.write(&row)?;
    fence.write(&metrics)?;
    let events = bus::events(&h, &fence, &q)?;
    let channel = bus::outcome_channel(&fence, &q, id)?;
    // 6.–7. writes, each replicated as its effect: dead, scored the time it was cancelled
    let mut writes = vec![
        op(Cmd::Zrem, &[active, id], Expect::Int(1)),
        op(Cmd::Zadd, &[dead, &now, id], Expect::Int(1)),
        op(
            Cmd::Hset,
            &[
                &row,
                b"state",
                State::Dead.field(),
                b"last_error",
                CANCELLED,
                b"failed",
                &now,
            ],
            Expect::AnyInt,
        ),
        op(
            Cmd::Hincrby,
            &[&metrics, b"count", b"1"],
            Expect::Int(count),
        ),
    ];
    let attempt = field(&seen, 3).unwrap_or(b"0");
    writes.extend(events.map(|ev| {
        ev.op(
            b"dead",
            id,
            attempt,
            &[b"error", CANCELLED, b"state", State::Dead.field()],
        )
    }));
    h.apply(&writes)?;
    // the death, told to a result waiter
    if let Some(channel) = channel {
        h.publish(&channel, b"dead")?;
    }
    Ok(int(1))
}
