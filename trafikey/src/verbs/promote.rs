//! EMQ.PROMOTE: move due scheduled jobs to pending (SPEC §3, §5.4). A ghost (an id in
//! schedule with no row) is removed from schedule and no row is created.

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use crate::decide::{num, owned_op, priority, Cmd, Expect, Op};
use crate::errors::Refusal;
use crate::grammar::{self, Argc};
use crate::host::{int, Host};
use crate::state::State;

pub const VERB: &str = "EMQ.PROMOTE";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 3;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 3, one ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(1))?;
    // 2. layout: schedule, pending, base
    let q = grammar::layout(&call, &["schedule", "pending"])?;
    let (schedule, pending) = (call.keys[0], call.keys[1]);
    // 3. arguments: limit
    let limit = grammar::limit(call.argv[0])?;
    let h = Host::new(ctx, VERB);
    let now = h.now_ms()?;
    // 4.–5. fence and reads: the due members, lowest first (schedule's type checked by the
    // read), then member by member, each row read as the caller: ghost or row, its score
    let fence = h.fence();
    let due = h.due(schedule, now, limit)?;
    if due.is_empty() {
        return Ok(int(0));
    }
    let mut zrem = vec![schedule.to_vec()];
    let mut zadd = vec![pending.to_vec()];
    let mut states: Vec<Op> = Vec::new();
    let mut moved_ids: Vec<(&[u8], Vec<u8>)> = Vec::new();
    for id in &due {
        let row = q.row(id);
        fence.read(&row)?;
        zrem.push(id.to_vec());
        let Some(seen) = h.hash(&row, &["priority", "attempts"])? else {
            continue;
        };
        moved_ids.push((&id[..], seen[1].as_deref().unwrap_or(b"0").to_vec()));
        let prio = priority(seen[0].as_deref()).map_err(Refusal::Counter)?;
        fence.write(&row)?;
        zadd.push(num(prio).to_vec());
        zadd.push(id.to_vec());
        states.push(owned_op(
            Cmd::Hset,
            vec![
                row.to_vec(),
                b"state".to_vec(),
                State::Pending.field().to_vec(),
            ],
            Expect::AnyInt,
        ));
    }
    let moved = states.len() as i64;
    if moved > 0 {
        h.expect_zset(pending)?;
    }
    // each moved job's `promoted` event, in selection order, when events are on
    if let Some(ev) = bus::events(&h, &fence, &q)? {
        states.extend(moved_ids.iter().map(|(id, attempt)| {
            ev.op(
                b"promoted",
                id,
                attempt,
                &[b"state", State::Pending.field()],
            )
        }));
    }
    // 6.–7. writes, each replicated as its effect: one ZREM for every member, one ZADD for
    // the rows, their states
    h.write(&owned_op(Cmd::Zrem, zrem, Expect::Int(due.len() as i64)))?;
    if moved > 0 {
        h.write(&owned_op(Cmd::Zadd, zadd, Expect::AnyInt))?;
        h.apply(&states)?;
        // the queue is claimable: a blocked BCLAIM wakes
        h.signal(pending);
    }
    Ok(int(moved))
}
