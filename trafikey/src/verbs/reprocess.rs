//! EMQ.REPROCESS: return a dead job to pending with both budgets refilled: `failures` and
//! `stalled` start again from 0, `attempts` (the token) is kept (SPEC §3, §5.2, §5.4, §9.2).

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use crate::decide::{num, op, priority, Cmd, Expect};
use crate::errors::Refusal;
use crate::grammar::{self, Argc};
use crate::host::{int, Host};
use crate::state::State;
use crate::verbs::{boundary, expect_state, FLAT_ONLY};

pub const VERB: &str = "EMQ.REPROCESS";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 3;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 3, one ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(1))?;
    // 2. layout: dead, pending, base
    let q = grammar::layout(&call, &["dead", "pending"])?;
    let (dead, pending) = (call.keys[0], call.keys[1]);
    // 3. arguments: id
    let id = grammar::id(call.argv[0])?;
    let h = Host::new(ctx, VERB);
    // 4.–5. fence and reads: not in dead answers 0 (dead's type checked by the read); the
    // row is read as the caller; a ghost (no row) is only removed from dead
    let fence = h.fence();
    if !h.in_zset(dead, id)? {
        return Ok(int(0));
    }
    let row = q.row(id);
    fence.read(&row)?;
    let prio;
    let (plan, reply) = match h.hash(&row, &["state", "group", "priority", "attempts"])? {
        None => (vec![op(Cmd::Zrem, &[dead, id], Expect::Int(1))], 0),
        Some(seen) => {
            boundary(FLAT_ONLY, seen[1].as_deref(), None)?;
            expect_state(VERB, seen[0].as_deref(), State::Dead)?;
            prio = num(priority(seen[2].as_deref()).map_err(Refusal::Counter)?);
            h.expect_zset(pending)?;
            fence.write(&row)?;
            let events = bus::events(&h, &fence, &q)?;
            let attempt = seen[3].as_deref().unwrap_or(b"0");
            let mut plan = vec![
                op(Cmd::Zrem, &[dead, id], Expect::Int(1)),
                op(Cmd::Zadd, &[pending, &prio, id], Expect::AnyInt),
                op(
                    Cmd::Hset,
                    &[
                        &row,
                        b"state",
                        State::Pending.field(),
                        b"failures",
                        b"0",
                        b"stalled",
                        b"0",
                    ],
                    Expect::AnyInt,
                ),
            ];
            plan.extend(events.map(|ev| {
                ev.op(
                    b"reprocessed",
                    id,
                    attempt,
                    &[b"state", State::Pending.field()],
                )
            }));
            (plan, 1)
        }
    };
    // 6.–7. writes, each replicated as its effect: the budgets refilled, attempts kept
    h.apply(&plan)?;
    if reply == 1 {
        // the queue is claimable: a blocked BCLAIM wakes
        h.signal(pending);
    }
    Ok(int(reply))
}
