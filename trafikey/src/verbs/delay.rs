//! EMQ.DELAY: hand a held job back to schedule, due after `delay_ms` (SPEC §3, §5.2).

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use crate::decide::{earlier, num, op, Cmd, Expect};
use crate::grammar::{self, Argc};
use crate::host::{int, Host};
use crate::state::State;
use crate::verbs::{held, LeaseCheck, FLAT_ONLY};

pub const VERB: &str = "EMQ.DELAY";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 3;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 3, three ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(3))?;
    // 2. layout: active, schedule, base
    let q = grammar::layout(&call, &["active", "schedule"])?;
    let (active, schedule) = (call.keys[0], call.keys[1]);
    // 3. arguments: id, token, delay_ms
    let id = grammar::id(call.argv[0])?;
    let token = call.argv[1];
    let delay = grammar::delay("delay_ms", call.argv[2])?;
    let h = Host::new(ctx, VERB);
    let due = grammar::at("delay_ms", h.now_ms()?, delay)?;
    // 4.–5. fence and reads: held and flat; schedule takes a ZADD
    let fence = h.fence();
    let row = q.row(id);
    if held(
        &h,
        &fence,
        &row,
        (active, LeaseCheck::Score),
        (id, token),
        FLAT_ONLY,
        &[],
    )?
    .is_none()
    {
        return Ok(int(0));
    }
    let events = bus::events(&h, &fence, &q)?;
    let sooner = earlier(due, h.first_score(schedule)?);
    fence.write(&row)?;
    // 6.–7. writes, each replicated as its effect; the `delayed` event when on
    let at = num(due);
    let mut writes = vec![
        op(Cmd::Zrem, &[active, id], Expect::Int(1)),
        op(Cmd::Zadd, &[schedule, &at, id], Expect::AnyInt),
        op(
            Cmd::Hset,
            &[&row, b"state", State::Scheduled.field()],
            Expect::AnyInt,
        ),
    ];
    writes.extend(
        events.map(|ev| ev.op(b"delayed", id, token, &[b"state", State::Scheduled.field()])),
    );
    h.apply(&writes)?;
    if sooner {
        // the next due time moved earlier: a blocked BCLAIM wakes to recompute its timeout
        h.signal(schedule);
    }
    Ok(int(due))
}
