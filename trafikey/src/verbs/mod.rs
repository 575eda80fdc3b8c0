//! The verbs, one file each, named after the verb: the thirteen of the job core, the bus
//! verbs (append, failures_incr, publish), then the optional ones (BCLAIM; remove, cancel,
//! purge, drain; enqueue_unique; claims, completes, publishes; enqueues). Every file runs SPEC §5's check
//! order in the same visible steps: shape, layout, arguments, fence, reads and checks,
//! writes (replicated as effects by the host).

pub mod append;
pub mod bclaim;
pub mod cancel;
pub mod claim;
pub mod claims;
pub mod complete;
pub mod completes;
pub mod delay;
pub mod drain;
pub mod enqueue;
pub mod enqueue_unique;
pub mod enqueues;
pub mod extend;
pub mod extends;
pub mod fail;
pub mod failures_incr;
pub mod promote;
pub mod publish;
pub mod publishes;
pub mod purge;
pub mod remove;
pub mod reprocess;
pub mod requeue;
pub mod reschedule;
pub mod schedule;
pub mod stalled_check;

use crate::decide::{deletes_row, owned_op, Cmd, Expect};
use crate::errors::{printable, Refusal};
use crate::ffi::Str;
use crate::grammar::Keyspace;
use crate::host::{Fence, Host, Seen};
use crate::kept::Shelf;
use crate::state::State;

/// The row fields a token verb reads first, in this order, before its own.
pub const HELD: [&str; 4] = ["attempts", "state", "group", "parent"];

thread_local! {
    /// The fields a token verb's check reads (`HELD`, then its own), in a vector kept from one
    /// check to the next (a check a job).
    static ROW_FIELDS: Shelf<&'static str> = const { Shelf::new(1..=usize::MAX) };
}

/// Which non-flat rows a verb refuses (SPEC §5.5).
#[derive(Debug, Clone, Copy)]
pub struct Boundary {
    pub lane: bool,
    pub flow: bool,
}

pub const FLAT_ONLY: Boundary = Boundary {
    lane: true,
    flow: false,
};
pub const FLAT_NO_FLOW: Boundary = Boundary {
    lane: true,
    flow: true,
};
pub const ANY_ROW: Boundary = Boundary {
    lane: false,
    flow: false,
};

/// Refuse a row the verb must not move: a lane row, or a flow child where `flow` is set.
pub fn boundary(b: Boundary, group: Option<&[u8]>, parent: Option<&[u8]>) -> Result<(), Refusal> {
    if b.lane && group.is_some() {
        return Err(Refusal::lane());
    }
    if b.flow && parent.is_some() {
        return Err(Refusal::flow());
    }
    Ok(())
}

/// Refuse a row whose `state` is not `want`.
pub fn expect_state(verb: &str, state: Option<&[u8]>, want: State) -> Result<(), Refusal> {
    let want_name = want.name();
    match state {
        Some(s) if s == want.field() => Ok(()),
        Some(s) => Err(Refusal::State(format!(
            "{verb} row is {}, not {want_name}",
            printable(s)
        ))),
        None => Err(Refusal::State(format!(
            "{verb} row has no state, not {want_name}"
        ))),
    }
}

/// How a verb's script checks that the id is in active.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseCheck {
    /// With a ZSCORE: a read, counted as one.
    Score,
    /// With the ZREM that removes it (COMPLETE): a write, which counts no read.
    Remove,
}

/// Steps 4–5 for a verb that takes a token on an active job (`row` = the id's row key): the row read once (the `HELD`
/// fields, then `extra`), then, in order: no row → `None` (reply 0); a refused boundary; a
/// token that is not `attempts` byte for byte → `None`; not `active` or not in active (asked
/// as the script asks: `check`) → EMQSTATE. On `Some`, the fields in `HELD` + `extra` order.
pub fn held<'e>(
    h: &Host<'_>,
    fence: &Fence,
    row: &[u8],
    (active, check): (&[u8], LeaseCheck),
    (id, token): (&[u8], &[u8]),
    b: Boundary,
    extra: impl IntoIterator<Item = &'e &'static str>,
) -> Result<Option<Seen>, Refusal> {
    // the row is checked for writing after the read when it is held (its write answered now
    // when the caller may do both)
    fence.read_to_write(row)?;
    // taken and put back in one lookup of the shelf: a check a job
    let seen = ROW_FIELDS.with(|shelf| {
        let mut fields = shelf.take();
        fields.extend(HELD.iter().chain(extra));
        let seen = h.row(row, &fields);
        shelf.put(fields);
        seen
    })?;
    let Some(seen) = seen else {
        return Ok(None);
    };
    let at = |i: usize| field(&seen, i);
    boundary(b, at(2), at(3))?;
    if at(0) != Some(token) {
        return Ok(None);
    }
    expect_state(h.verb, at(1), State::Active)?;
    let in_active = match check {
        LeaseCheck::Score => h.in_zset(active, id)?,
        LeaseCheck::Remove => h.in_zset_to_remove(active, id)?,
    };
    if !in_active {
        return Err(Refusal::State(format!("{} id is not in active", h.verb)));
    }
    Ok(Some(seen))
}

/// A batch verb's reply: one element per job, in order: its integer answer, or its refusal (an
/// error element: nothing was written for it).
pub fn reply_each<'r>(
    ctx: &valkey_module::Context,
    answers: impl ExactSizeIterator<Item = Result<i64, &'r Refusal>>,
) {
    crate::ffi::reply_array(ctx, answers.len());
    for answer in answers {
        match answer {
            Ok(n) => crate::ffi::reply_int(ctx, n),
            Err(r) => crate::ffi::reply_error(ctx, &r.to_string()),
        }
    }
}

/// Field `i` of a row read, borrowed.
pub fn field(seen: &[Option<Str>], i: usize) -> Option<&[u8]> {
    seen.get(i).and_then(|f| f.as_deref())
}

/// Steps 4–7 for a verb that clears members of one set (PURGE: dead, DRAIN: pending): each
/// row read as the caller (a wrong-typed row refuses the whole command before any write),
/// then one ZREM of every member, a DEL of each row whose state is `want`, and a `removed`
/// event for each when the queue's events are on. Returns how many members left the set.
pub fn clear_members(
    h: &Host<'_>,
    q: &Keyspace<'_>,
    set: &[u8],
    members: &[Str],
    want: State,
) -> Result<i64, Refusal> {
    if members.is_empty() {
        return Ok(0);
    }
    let fence = h.fence();
    let mut rows = Vec::new();
    let mut told = Vec::new();
    for id in members {
        let row = q.row(id);
        fence.read(&row)?;
        let seen = h.hash(&row, &["state", "attempts"])?;
        if deletes_row(seen.as_ref().map(|f| field(f, 0)), want) {
            fence.write(&row)?;
            rows.push(row);
            let attempt = seen.as_ref().and_then(|f| field(f, 1)).unwrap_or(b"0");
            told.push((id, attempt.to_vec()));
        }
    }
    let events = crate::bus::events(h, &fence, q)?;
    let n = members.len() as i64;
    let mut zrem = vec![set.to_vec()];
    zrem.extend(members.iter().map(|m| m.to_vec()));
    let mut plan = vec![owned_op(Cmd::Zrem, zrem, Expect::Int(n))];
    plan.extend(
        rows.into_iter()
            .map(|row| owned_op(Cmd::Del, vec![row.to_vec()], Expect::Int(1))),
    );
    if let Some(ev) = &events {
        let state: &[&[u8]] = &[b"state", want.field()];
        plan.extend(
            told.iter()
                .map(|(id, attempt)| ev.op(b"removed", id, attempt, state)),
        );
    }
    h.apply(&plan)?;
    Ok(n)
}
