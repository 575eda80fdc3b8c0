//! EMQ.ENQUEUE.UNIQUE: ENQUEUE (or SCHEDULE, with `delay_ms`) that answers why, with a unique
//! window kept after the job completes and a debounce that replaces a waiting job's payload
//! (docs/spec.md §14).

use valkey_module::{Context, ValkeyResult};

use crate::bus;
use crate::decide::{admission, earlier, new_row, num, op, Admission, Cmd, Expect};
use crate::errors::Refusal;
use crate::ffi::Kind;
use crate::grammar::{self, Argc};
use crate::host::{bulk, Host};
use crate::state::State;
use crate::verbs::{boundary, field, FLAT_NO_FLOW};

pub const VERB: &str = "EMQ.ENQUEUE.UNIQUE";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 3;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 3, five ARGV and an optional delay_ms
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Late(5, 1))?;
    // 2. layout: pending, schedule, base
    let q = grammar::layout(&call, &["pending", "schedule"])?;
    let (pending, schedule) = (call.keys[0], call.keys[1]);
    // 3. arguments: id, payload, priority, unique_ms, replace, [delay_ms]
    let id = grammar::id(call.argv[0])?;
    let payload = call.argv[1];
    let priority = grammar::priority(call.argv[2])?;
    let unique = grammar::delay("unique_ms", call.argv[3])?;
    let replace = grammar::number("replace", call.argv[4], 0, 1)? == 1;
    let delay = call
        .argv
        .get(5)
        .map(|raw| grammar::delay("delay_ms", raw))
        .transpose()?;
    let h = Host::new(ctx, VERB);
    let now = h.now_ms()?;
    let due = delay.map(|d| grammar::at("delay_ms", now, d)).transpose()?;
    // 4.–5. fence and reads: the row, then (no row) the unique marker
    let fence = h.fence();
    let (row, marker) = (q.row(id), q.key(&[b"unique:".as_slice(), id].concat()));
    fence.read(&row)?;
    let seen = h.hash(&row, &["state", "group", "parent"])?;
    if let Some(seen) = &seen {
        if replace {
            boundary(FLAT_NO_FLOW, field(seen, 1), field(seen, 2))?;
        }
    } else {
        fence.read(&marker)?;
        h.expect_hash(&marker)?;
    }
    let marked = seen.is_none() && h.kind(&marker)? == Kind::Hash;
    let state = seen.as_ref().map(|s| field(s, 0));
    let verdict = admission(VERB, state, replace, marked).map_err(Refusal::State)?;
    let created = num(now);
    let (due_num, prio) = (due.map(num), num(priority));
    let mut plan = Vec::new();
    let sooner = match due {
        Some(d) if verdict != Admission::Exists && verdict != Admission::Unique => {
            earlier(d, h.first_score(schedule)?)
        }
        _ => false,
    };
    match verdict {
        Admission::Exists | Admission::Unique => return Ok(bulk(verdict.reply())),
        Admission::Replace(from) => {
            let set = if from == State::Pending {
                pending
            } else {
                schedule
            };
            if !h.in_zset(set, id)? {
                return Err(Refusal::State(format!("{VERB} id is not in {}", from.set())).into());
            }
            fence.write(&row)?;
            match &due_num {
                None => plan.push(op(Cmd::Hset, &[&row, b"payload", payload], Expect::AnyInt)),
                Some(at) => {
                    if from == State::Pending {
                        plan.push(op(Cmd::Zrem, &[pending, id], Expect::Int(1)));
                    }
                    plan.push(op(
                        Cmd::Hset,
                        &[
                            &row,
                            b"state",
                            State::Scheduled.field(),
                            b"payload",
                            payload,
                        ],
                        Expect::AnyInt,
                    ));
                    plan.push(op(Cmd::Zadd, &[schedule, at, id], Expect::AnyInt));
                }
            }
            h.apply(&plan)?;
            if sooner {
                h.signal(schedule);
            }
            return Ok(bulk(verdict.reply()));
        }
        Admission::Create => {}
    }
    let (set, state, score) = match &due_num {
        None => (pending, State::Pending, &prio),
        Some(at) => (schedule, State::Scheduled, at),
    };
    h.expect_zset(set)?;
    fence.write(&row)?;
    let events = bus::events(&h, &fence, &q)?;
    // 6.–7. writes, each replicated as its effect
    let unique_num = num(unique);
    plan.push(new_row(
        &row,
        state.field(),
        payload,
        &created,
        (priority, &prio),
        (unique > 0).then_some(&unique_num[..]),
    ));
    plan.push(op(Cmd::Zadd, &[set, score, id], Expect::AnyInt));
    plan.extend(events.map(|ev| ev.op(b"enqueued", id, b"0", &[b"state", state.field()])));
    h.apply(&plan)?;
    if due.is_none() {
        h.signal(pending);
    } else if sooner {
        h.signal(schedule);
    }
    Ok(bulk(verdict.reply()))
}
