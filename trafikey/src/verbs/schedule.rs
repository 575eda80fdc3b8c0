//! EMQ.SCHEDULE: admit a job to schedule, due after `delay_ms` on the server clock (SPEC §3).

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use crate::decide::{earlier, new_row, num, op, Cmd, Expect};
use crate::grammar::{self, Argc};
use crate::host::{int, Host};
use crate::state::State;

pub const VERB: &str = "EMQ.SCHEDULE";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 2;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 2, four ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(4))?;
    // 2. layout: schedule, base
    let q = grammar::layout(&call, &["schedule"])?;
    let schedule = call.keys[0];
    // 3. arguments: id, payload, delay_ms, priority
    let id = grammar::id(call.argv[0])?;
    let payload = call.argv[1];
    let delay = grammar::delay("delay_ms", call.argv[2])?;
    let priority = grammar::priority(call.argv[3])?;
    let h = Host::new(ctx, VERB);
    let now = h.now_ms()?;
    let due = grammar::at("delay_ms", now, delay)?;
    let created = num(now);
    // 4. fence: the row is read before it is written
    let fence = h.fence();
    let row = q.row(id);
    fence.read(&row)?;
    // 5. reads and checks
    if h.kind(&row)? != crate::ffi::Kind::Empty {
        return Ok(int(0));
    }
    let sooner = earlier(due, h.first_score(schedule)?);
    fence.write(&row)?;
    let events = bus::events(&h, &fence, &q)?;
    // 6.–7. writes, each replicated as its effect
    let prio = num(priority);
    let due = num(due);
    let mut plan = vec![
        new_row(
            &row,
            State::Scheduled.field(),
            payload,
            &created,
            (priority, &prio),
            None,
        ),
        op(Cmd::Zadd, &[schedule, &due, id], Expect::AnyInt),
    ];
    plan.extend(
        events.map(|ev| ev.op(b"enqueued", id, b"0", &[b"state", State::Scheduled.field()])),
    );
    h.apply(&plan)?;
    if sooner {
        // the next due time moved earlier: a blocked BCLAIM wakes to recompute its timeout
        h.signal(schedule);
    }
    Ok(int(1))
}
