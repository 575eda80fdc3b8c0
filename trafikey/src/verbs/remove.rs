//! EMQ.REMOVE: delete a job that is waiting (pending, scheduled) or dead: its row and its set
//! membership go together (SPEC §9, docs/spec.md "Control verbs"). An active job is refused:
//! it has a holder, so it is cancelled (EMQ.CANCEL), not removed.

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use crate::decide::{op, removable, Cmd, Expect};
use crate::errors::Refusal;
use crate::grammar::{self, Argc};
use crate::host::{bulk, int, Host};
use crate::state::State;
use crate::verbs::{boundary, field, FLAT_NO_FLOW};

pub const VERB: &str = "EMQ.REMOVE";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 4;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 4, one ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(1))?;
    // 2. layout: pending, schedule, dead, base
    let q = grammar::layout(&call, &["pending", "schedule", "dead"])?;
    // 3. arguments: id
    let id = grammar::id(call.argv[0])?;
    // 4.–5. fence and reads: no row answers 0; flat, not a flow child; waiting or dead, and
    // a member of the set its state names
    let h = Host::new(ctx, VERB);
    let fence = h.fence();
    let row = q.row(id);
    fence.read(&row)?;
    let Some(seen) = h.hash(&row, &["state", "group", "parent", "attempts"])? else {
        return Ok(int(0));
    };
    boundary(FLAT_NO_FLOW, field(&seen, 1), field(&seen, 2))?;
    let state = removable(VERB, field(&seen, 0)).map_err(Refusal::State)?;
    let set = match state {
        State::Pending => call.keys[0],
        State::Scheduled => call.keys[1],
        _ => call.keys[2],
    };
    if !h.in_zset(set, id)? {
        return Err(Refusal::State(format!("{VERB} id is not in {}", state.set())).into());
    }
    fence.write(&row)?;
    let events = bus::events(&h, &fence, &q)?;
    // 6.–7. writes, each replicated as its effect
    let mut plan = vec![
        op(Cmd::Zrem, &[set, id], Expect::Int(1)),
        op(Cmd::Del, &[&row], Expect::Int(1)),
    ];
    let attempt = field(&seen, 3).unwrap_or(b"0");
    plan.extend(events.map(|ev| ev.op(b"removed", id, attempt, &[b"state", state.field()])));
    h.apply(&plan)?;
    Ok(bulk(state.field()))
}
