//! EMQ.ENQUEUE: admit a job to pending (SPEC §3).

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use crate::decide::{new_row, num, op, Cmd, Expect};
use crate::grammar::{self, Argc};
use crate::host::{int, Host};
use crate::state::State;

pub const VERB: &str = "EMQ.ENQUEUE";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 2;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 2, three ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(3))?;
    // 2. layout: pending, base
    let q = grammar::layout(&call, &["pending"])?;
    let pending = call.keys[0];
    // 3. arguments: id, payload (any bytes), priority
    let id = grammar::id(call.argv[0])?;
    let payload = call.argv[1];
    let priority = grammar::priority(call.argv[2])?;
    // 4. fence: the row is read (does it exist?) before it is written
    let h = Host::new(ctx, VERB);
    let created = num(h.now_ms()?);
    let fence = h.fence();
    let row = q.row(id);
    fence.read(&row)?;
    // 5. reads and checks: an id with a row (of any type) is not enqueued twice
    if h.kind(&row)? != crate::ffi::Kind::Empty {
        return Ok(int(0));
    }
    h.expect_zset(pending)?;
    fence.write(&row)?;
    let events = bus::events(&h, &fence, &q)?;
    // 6.–7. writes, each replicated as its effect
    let prio = num(priority);
    let row_set = new_row(
        &row,
        State::Pending.field(),
        payload,
        &created,
        (priority, &prio),
        None,
    );
    let zadd = op(Cmd::Zadd, &[pending, &prio, id], Expect::AnyInt);
    // the plan on the stack: with the queue's event, or without
    match events.map(|ev| ev.op(b"enqueued", id, b"0", &[b"state", State::Pending.field()])) {
        Some(event) => h.apply(&[row_set, zadd, event])?,
        None => h.apply(&[row_set, zadd])?,
    }
    // the queue is claimable: a blocked BCLAIM wakes
    h.signal(pending);
    Ok(int(1))
}
