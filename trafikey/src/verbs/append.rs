//! EMQ.APPEND: a held job's progress, fenced by its token: `progress` written to the row and,
//! when the queue's events are on, appended to the event stream (docs/spec.md §12). A holder
//! that lost its lease answers 0 and writes nothing.

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use crate::decide::{op, Cmd, Expect};
use crate::grammar::{self, Argc};
use crate::host::{int, Host};
use crate::verbs::{held, LeaseCheck, ANY_ROW};

pub const VERB: &str = "EMQ.APPEND";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 2;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 2, three ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(3))?;
    // 2. layout: active, base
    let q = grammar::layout(&call, &["active"])?;
    let active = call.keys[0];
    // 3. arguments: id, token (bytes), progress (bytes, bounded)
    let id = grammar::id(call.argv[0])?;
    let token = call.argv[1];
    let progress = grammar::progress(call.argv[2])?;
    // 4.–5. fence and reads: held (any row: progress is no move), then the events
    let h = Host::new(ctx, VERB);
    let fence = h.fence();
    let row = q.row(id);
    if held(
        &h,
        &fence,
        &row,
        (active, LeaseCheck::Score),
        (id, token),
        ANY_ROW,
        &[],
    )?
    .is_none()
    {
        return Ok(int(0));
    }
    fence.write(&row)?;
    let events = bus::events(&h, &fence, &q)?;
    let mut plan = vec![op(
        Cmd::Hset,
        &[&row, b"progress", progress],
        Expect::AnyInt,
    )];
    plan.extend(events.map(|ev| ev.op(b"progress", id, token, &[b"progress", progress])));
    // 6.–7. writes, each replicated as its effect
    h.apply(&plan)?;
    Ok(int(1))
}
