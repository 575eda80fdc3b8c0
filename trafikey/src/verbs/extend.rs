//! EMQ.EXTEND: renew a held lease (SPEC §3, §5.2); the lease carries the epoch again.

use valkey_module::{Context, ValkeyResult};

use crate::decide::{num, op, Cmd, Expect};
use crate::grammar::{self, Argc};
use crate::host::{int, Host};
use crate::verbs::{held, LeaseCheck, ANY_ROW};

pub const VERB: &str = "EMQ.EXTEND";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 2;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 2, three ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(3))?;
    // 2. layout: active, base
    let q = grammar::layout(&call, &["active"])?;
    let active = call.keys[0];
    // 3. arguments: id, token (bytes), lease_ms
    let id = grammar::id(call.argv[0])?;
    let token = call.argv[1];
    let lease = grammar::lease_ms(call.argv[2])?;
    let h = Host::new(ctx, VERB);
    let deadline = grammar::at("lease_ms", h.now_ms()?, lease)?;
    // 4.–5. fence and reads: the row read once; no row or another token answers 0
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
    let run_id = h.epoch()?;
    // 6.–7. writes, each replicated as its effect: the member exists, so ZADD adds nothing
    h.apply(&[
        op(Cmd::Zadd, &[active, &num(deadline), id], Expect::Int(0)),
        op(Cmd::Hset, &[&row, b"lease_epoch", run_id], Expect::AnyInt),
    ])?;
    Ok(int(deadline))
}
