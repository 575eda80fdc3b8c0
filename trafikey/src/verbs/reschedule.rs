//! EMQ.RESCHEDULE: move a scheduled job's due time (SPEC §3, §5.2). No token: the job is not
//! held by anyone while scheduled.

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use crate::decide::{earlier, num, op, Cmd, Expect};
use crate::errors::Refusal;
use crate::grammar::{self, Argc};
use crate::host::{int, Host};
use crate::state::State;
use crate::verbs::{boundary, expect_state, FLAT_ONLY};

pub const VERB: &str = "EMQ.RESCHEDULE";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 2;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 2, two ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(2))?;
    // 2. layout: schedule, base
    let q = grammar::layout(&call, &["schedule"])?;
    let schedule = call.keys[0];
    // 3. arguments: id, delay_ms
    let id = grammar::id(call.argv[0])?;
    let delay = grammar::delay("delay_ms", call.argv[1])?;
    let h = Host::new(ctx, VERB);
    let due = grammar::at("delay_ms", h.now_ms()?, delay)?;
    // 4. fence: the row is only read
    let fence = h.fence();
    let row = q.row(id);
    fence.read(&row)?;
    // 5. reads and checks: no row answers 0; flat, scheduled and in schedule
    let Some(seen) = h.hash(&row, &["state", "group", "attempts"])? else {
        return Ok(int(0));
    };
    boundary(FLAT_ONLY, seen[1].as_deref(), None)?;
    expect_state(VERB, seen[0].as_deref(), State::Scheduled)?;
    if !h.in_zset(schedule, id)? {
        return Err(Refusal::State(format!("{VERB} id is not in schedule")).into());
    }
    let events = bus::events(&h, &fence, &q)?;
    let sooner = earlier(due, h.first_score(schedule)?);
    // 6.–7. writes, each replicated as its effect: the member exists, so ZADD adds nothing;
    // the `rescheduled` event when on
    let at = num(due);
    let attempt = seen[2].as_deref().unwrap_or(b"0");
    let mut writes = vec![op(Cmd::Zadd, &[schedule, &at, id], Expect::Int(0))];
    writes.extend(events.map(|ev| {
        ev.op(
            b"rescheduled",
            id,
            attempt,
            &[b"state", State::Scheduled.field()],
        )
    }));
    h.apply(&writes)?;
    if sooner {
        // the next due time moved earlier: a blocked BCLAIM wakes to recompute its timeout
        h.signal(schedule);
    }
    Ok(int(due))
}
