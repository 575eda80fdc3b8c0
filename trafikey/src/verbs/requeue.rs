//! EMQ.REQUEUE: release a held job back to pending, spending no budget (SPEC §3, §5.7).

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use crate::decide::{num, op, priority, Cmd, Expect};
use crate::errors::Refusal;
use crate::grammar::{self, Argc};
use crate::host::{int, Host};
use crate::state::State;
use crate::verbs::{field, held, LeaseCheck, FLAT_ONLY, HELD};

pub const VERB: &str = "EMQ.REQUEUE";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 3;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 3, two ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(2))?;
    // 2. layout: active, pending, base
    let q = grammar::layout(&call, &["active", "pending"])?;
    let (active, pending) = (call.keys[0], call.keys[1]);
    // 3. arguments: id, token
    let id = grammar::id(call.argv[0])?;
    let token = call.argv[1];
    // 4.–5. fence and reads: held and flat; the pending score is the row's priority
    let h = Host::new(ctx, VERB);
    let fence = h.fence();
    let row = q.row(id);
    let Some(seen) = held(
        &h,
        &fence,
        &row,
        (active, LeaseCheck::Score),
        (id, token),
        FLAT_ONLY,
        &["priority"],
    )?
    else {
        return Ok(int(0));
    };
    let prio = priority(field(&seen, HELD.len())).map_err(Refusal::Counter)?;
    h.expect_zset(pending)?;
    fence.write(&row)?;
    let events = bus::events(&h, &fence, &q)?;
    // 6.–7. writes, each replicated as its effect: no counter; the `requeued` event when on
    let prio = num(prio);
    let mut writes = vec![
        op(Cmd::Zrem, &[active, id], Expect::Int(1)),
        op(Cmd::Zadd, &[pending, &prio, id], Expect::AnyInt),
        op(
            Cmd::Hset,
            &[&row, b"state", State::Pending.field()],
            Expect::AnyInt,
        ),
    ];
    writes.extend(
        events.map(|ev| ev.op(b"requeued", id, token, &[b"state", State::Pending.field()])),
    );
    h.apply(&writes)?;
    // the queue is claimable: a blocked BCLAIM wakes
    h.signal(pending);
    Ok(int(1))
}
