//! EMQ.CLAIM: lease the head of pending (SPEC §3, §5.1). The pause read is folded in; the
//! head is peeked, checked and predicted, and only then popped. BCLAIM runs the same steps
//! 4–7 ([`claim`]) when it is called and at every wake.

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use crate::bus;
use crate::decide::{next_attempt, num, op, Expect};
use crate::errors::Refusal;
use crate::grammar::{self, Argc, Call, Keyspace};
use crate::host::{bulk, int, Host};
use crate::state::State;

pub const VERB: &str = "EMQ.CLAIM";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 3;

/// What CLAIM's checks and writes came to.
pub enum Claimed {
    /// A job leased: `[id, payload, attempts]`.
    Job(ValkeyValue),
    /// The head was a ghost: popped (written), answered empty.
    Ghost,
    /// Paused, or pending empty: answered empty, nothing written (where BCLAIM blocks).
    Idle,
}

impl Claimed {
    /// CLAIM's reply.
    pub fn reply(self) -> ValkeyValue {
        match self {
            Claimed::Job(job) => job,
            Claimed::Ghost | Claimed::Idle => ValkeyValue::Array(Vec::new()),
        }
    }
}

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 3, one ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(1))?;
    // 2. layout: pending, active, base
    let q = grammar::layout(&call, &["pending", "active"])?;
    // 3. arguments: lease_ms
    let lease = grammar::lease_ms(call.argv[0])?;
    Ok(claim(&Host::new(ctx, VERB), &q, &call, lease)?.reply())
}

/// Steps 4–7 of CLAIM (and of BCLAIM, at its call and at every wake): `call` has passed the
/// shape and layout checks of pending, active, base; `lease` its grammar.
pub fn claim(h: &Host<'_>, q: &Keyspace<'_>, call: &Call<'_>, lease: i64) -> Result<Claimed, Refusal> {
    let (pending, active) = (call.keys[0], call.keys[1]);
    let now = h.now_ms()?;
    let deadline = grammar::at("lease_ms", now, lease)?;
    let started = num(now);

    // 4. fence: meta is read first
    let fence = h.fence();
    let meta = q.meta();
    fence.read(&meta)?;

    // 5. reads and checks. Any `paused` value (`0` and empty included) holds the queue; a
    // wrong-typed meta is refused rather than read as paused. The same read gives the
    // queue's event switch.
    let mut switch = None;
    if let Some(m) = h.hash(&meta, &["paused", "events"])? {
        if m.first().is_some_and(Option::is_some) {
            return Ok(Claimed::Idle);
        }
        switch = m.into_iter().nth(1).flatten();
    }
    // the head ZPOPMIN would pop, peeked (pending's type checked by the read)
    let Some(id) = h.head(pending)? else {
        return Ok(Claimed::Idle);
    };
    let row = q.row(&id);
    fence.read(&row)?;
    let seen = h.hash(&row, &["attempts", "payload"])?;
    let mut planned = None;
    if let Some(seen) = &seen {
        // a real row: the increment predicted, active able to take the lease
        let att = next_attempt(seen[0].as_deref()).map_err(Refusal::Counter)?;
        h.expect_zset(active)?;
        fence.write(&row)?;
        planned = Some((
            att,
            h.epoch()?,
            bus::events_on(&h, &fence, &q, switch.as_deref())?,
        ));
    }

    // 6.–7. writes, each replicated as its effect: the pop verified against the peek; a
    // ghost (no row) ends there
    h.write(&op("ZPOPMIN", &[pending], Expect::Popped(id.to_vec())))?;
    let (Some((att, run_id, events)), Some(seen)) = (planned, seen) else {
        return Ok(Claimed::Ghost);
    };
    // planted (claim): the lease is stamped with an empty epoch, not the run_id
    #[cfg(feature = "planted")]
    let run_id: &[u8] = if crate::plant::on("claim.blank_epoch") {
        b""
    } else {
        run_id
    };
    let (token, deadline) = (num(att), num(deadline));
    let mut plan = vec![
        op("HINCRBY", &[&row, b"attempts", b"1"], Expect::Int(att)),
        op(
            "HSET",
            &[
                &row,
                b"state",
                State::Active.field(),
                b"lease_epoch",
                run_id,
                b"started",
                &started,
            ],
            Expect::AnyInt,
        ),
        op("ZADD", &[active, &deadline, &id], Expect::AnyInt),
    ];
    plan.extend(events.map(|ev| ev.op(b"claimed", &id, &token, &[])));
    h.apply(&plan)?;
    let payload = seen.into_iter().nth(1).flatten();
    Ok(Claimed::Job(ValkeyValue::Array(vec![
        bulk(&id),
        payload.map_or(ValkeyValue::Null, |p| bulk(&p)),
        int(att),
    ])))
}
