//! EMQ.CLAIM: lease the head of pending (SPEC §3, §5.1). The pause read is folded in; the
//! head is peeked, checked and predicted, and only then popped. BCLAIM runs the same steps
//! 4–7 ([`claim`]) when it is called and at every wake. A queue with a rate limit in its meta
//! (docs/spec.md §13) also checks its sliding log of starts before the pop, and logs the start
//! with the lease; the optional `rated` argument (token `claim.rate`) asks for the wait when
//! the limit holds the claim.

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use crate::bus;
use crate::decide::{next_attempt, num, op, owned_op, rate_of, rate_wait, Expect};
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
    /// The queue's rate limit holds the claim for this many ms: nothing written; answered
    /// as that integer when the caller is `rated`, else as the empty array.
    Throttled(i64),
}

impl Claimed {
    /// CLAIM's reply; `rated`: the caller reads a wait.
    pub fn reply(self, rated: bool) -> ValkeyValue {
        match self {
            Claimed::Job(job) => job,
            Claimed::Throttled(wait) if rated => int(wait),
            Claimed::Ghost | Claimed::Idle | Claimed::Throttled(_) => {
                ValkeyValue::Array(Vec::new())
            }
        }
    }

    /// Nothing claimed and nothing written, where BCLAIM waits: idle, or held by the rate limit
    /// for a caller that reads no wait (it waits for a wake instead of asking again at once).
    pub fn waits(&self, rated: bool) -> bool {
        matches!(self, Claimed::Idle) || (matches!(self, Claimed::Throttled(_)) && !rated)
    }
}

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 3, one ARGV and the optional `rated`
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Late(1, 1))?;
    // 2. layout: pending, active, base
    let q = grammar::layout(&call, &["pending", "active"])?;
    // 3. arguments: lease_ms[, rated]
    let lease = grammar::lease_ms(call.argv[0])?;
    let rated = grammar::rated(call.argv.get(1).copied())?;
    Ok(claim(&Host::new(ctx, VERB), &q, &call, lease)?.reply(rated))
}

/// Steps 4–7 of CLAIM (and of BCLAIM, at its call and at every wake): `call` has passed the
/// shape and layout checks of pending, active, base; `lease` its grammar.
pub fn claim(
    h: &Host<'_>,
    q: &Keyspace<'_>,
    call: &Call<'_>,
    lease: i64,
) -> Result<Claimed, Refusal> {
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
    // queue's event switch and its rate limit (a malformed one refused).
    let (mut switch, mut rate) = (None, None);
    if let Some(m) = h.hash(&meta, &["paused", "events", "rate_limit", "rate_window"])? {
        if m.first().is_some_and(Option::is_some) {
            return Ok(Claimed::Idle);
        }
        rate = rate_of(m[2].as_deref(), m[3].as_deref()).map_err(Refusal::Counter)?;
        switch = m.into_iter().nth(1).flatten();
    }
    // the head ZPOPMIN would pop, peeked (pending's type checked by the read)
    let Some(id) = h.head(pending)? else {
        return Ok(Claimed::Idle);
    };
    // the rate limit: the sliding log's starts within the window (docs/spec.md §13)
    let log = q.rate();
    let mut stale = Vec::new();
    if let Some(rate) = rate {
        fence.read(&log)?;
        let since = now - rate.window;
        let (old, recent): (Vec<_>, Vec<_>) =
            h.scores(&log)?.into_iter().partition(|(_, s)| *s <= since);
        let recent: Vec<i64> = recent.into_iter().map(|(_, s)| s).collect();
        // planted (claim): the limit lets one more start through
        #[cfg(feature = "planted")]
        let rate = if crate::plant::on("claim.rate_one_more") {
            crate::decide::Rate {
                limit: rate.limit + 1,
                ..rate
            }
        } else {
            rate
        };
        if let Some(wait) = rate_wait(rate, &recent, now) {
            return Ok(Claimed::Throttled(wait));
        }
        stale = old.into_iter().map(|(m, _)| m.to_vec()).collect();
    }
    let row = q.row(&id);
    fence.read(&row)?;
    let seen = h.hash(&row, &["attempts", "payload"])?;
    let mut planned = None;
    if let Some(seen) = &seen {
        // a real row: the increment predicted, active able to take the lease
        let att = next_attempt(seen[0].as_deref()).map_err(Refusal::Counter)?;
        h.expect_zset(active)?;
        fence.write(&row)?;
        if rate.is_some() {
            fence.write(&log)?;
        }
        planned = Some((
            att,
            h.epoch()?,
            bus::events_on(h, &fence, q, switch.as_deref())?,
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
    // the start logged: the window's stale entries out, this start in, the log's expiry a
    // window from now (an idle queue's log goes by itself)
    if let Some(rate) = rate {
        if !stale.is_empty() {
            let n = stale.len() as i64;
            plan.push(owned_op(
                "ZREM",
                [vec![log.to_vec()], stale].concat(),
                Expect::Int(n),
            ));
        }
        let start = [&id[..], b":", &token[..]].concat();
        plan.push(owned_op(
            "ZADD",
            vec![log.to_vec(), started.to_vec(), start],
            Expect::Int(1),
        ));
        plan.push(owned_op(
            "PEXPIREAT",
            vec![log.to_vec(), num(now + rate.window).to_vec()],
            Expect::Int(1),
        ));
    }
    h.apply(&plan)?;
    let payload = seen.into_iter().nth(1).flatten();
    Ok(Claimed::Job(ValkeyValue::Array(vec![
        bulk(&id),
        payload.map_or(ValkeyValue::Null, |p| bulk(&p)),
        int(att),
    ])))
}
