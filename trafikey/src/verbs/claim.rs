//! EMQ.CLAIM: lease the head of pending (SPEC §3, §5.1). The pause read is folded in; the
//! head is peeked, checked and predicted, and only then popped. BCLAIM runs the same steps
//! 4–7 ([`claim`]) when it is called and at every wake. A queue with a rate limit in its meta
//! (docs/spec.md §13) also checks its sliding log of starts before the pop, and logs the start
//! with the lease; the optional `rated` argument (token `claim.rate`) asks for the wait when
//! the limit holds the claim.

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use crate::bus;
use crate::decide::{
    next_attempt, num, op, owned_op, rate_of, rate_wait, recycle_plan, spare_plan, Cmd, Expect, Num,
};
use crate::errors::Refusal;
use crate::ffi::{self, Str};
use crate::grammar::{self, Argc, Call, Keyspace};
use crate::host::{bulk, int, Host};
use crate::kept::Shelf;
use crate::state::State;

pub const VERB: &str = "EMQ.CLAIM";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 3;

/// What CLAIM's checks and writes came to.
pub enum Claimed {
    /// A job leased: `[id, payload, attempts]`.
    Job(Job),
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
            Claimed::Job(job) => job.value(),
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
    let run = claim_run(h, q, call, lease, 1, Ghosts::End)?;
    let stop = run.stop;
    Ok(match (run.first_job(), stop) {
        (Some(job), _) => Claimed::Job(job),
        (None, Stop::Ghost) => Claimed::Ghost,
        (None, Stop::Throttled(wait)) => Claimed::Throttled(wait),
        (None, Stop::Idle | Stop::Full) => Claimed::Idle,
    })
}

/// What a ghost at the head does to a run of claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ghosts {
    /// It is popped and ends the run (CLAIM answers empty).
    End,
    /// It is popped and passed over, uncounted (CLAIMS).
    Skip,
}

/// Why a run of claims stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// It leased as many jobs as it was asked for.
    Full,
    /// A ghost ended it ([`Ghosts::End`]).
    Ghost,
    /// Paused, or pending empty.
    Idle,
    /// The queue's rate limit holds the next claim for this many ms.
    Throttled(i64),
}

/// A run of claims: each member of pending it took (leased, or a ghost), in order, and why it
/// stopped. Its vector goes back to be kept for the next run when it is dropped.
pub struct Run {
    taken: Vec<Taken>,
    pub stop: Stop,
}

impl Run {
    /// The leased jobs, in order: id, new attempts, payload.
    fn leases(&self) -> impl Iterator<Item = (&Str, &Lease)> {
        self.taken
            .iter()
            .filter_map(|t| t.lease.as_ref().map(|l| (&t.id, l)))
    }

    /// How many jobs it leased.
    pub fn leased(&self) -> usize {
        self.leases().count()
    }

    /// Each leased job's CLAIM reply, sent (CLAIMS: a hundred jobs replied without a value
    /// built for each).
    pub fn reply_jobs(&self, ctx: &Context) {
        for (id, l) in self.leases() {
            ffi::reply_array(ctx, 3);
            ffi::reply_str(ctx, id);
            match &l.payload {
                Some(payload) => ffi::reply_str(ctx, payload),
                None => ffi::reply_null(ctx),
            }
            ffi::reply_int(ctx, l.att);
        }
    }

    /// Its first leased job (CLAIM's run leases at most one).
    fn first_job(mut self) -> Option<Job> {
        let at = self.taken.iter().position(|t| t.lease.is_some())?;
        let t = self.taken.swap_remove(at);
        t.lease.map(|l| Job {
            id: t.id,
            payload: l.payload,
            attempts: l.att,
        })
    }
}

/// How many members a kept run's vector has room for, at most: a bigger one (a run of
/// hundreds) is let go.
const KEPT_TAKEN_MAX: usize = 128;

thread_local! {
    /// The vector of the last run, emptied: each CLAIMS needs one, a few hundred bytes a job,
    /// more than glibc's malloc keeps at hand for a batch of ten.
    static SPARE_TAKEN: Shelf<Taken> = const { Shelf::new(1..=KEPT_TAKEN_MAX) };
}

impl Drop for Run {
    fn drop(&mut self) {
        // an idle run's vector has no room: it would not be kept, and leaves the kept one in
        // place without a look at the shelf
        if self.taken.capacity() > 0 {
            let taken = std::mem::take(&mut self.taken);
            SPARE_TAKEN.with(|kept| kept.put(taken));
        }
    }
}

/// A leased job, as CLAIM replies it: `[id, payload, attempts]`, the id and payload the
/// server's own strings.
pub struct Job {
    id: Str,
    payload: Option<Str>,
    attempts: i64,
}

impl Job {
    /// Its reply as a value (CLAIM's, BCLAIM's: one job).
    pub fn value(&self) -> ValkeyValue {
        ValkeyValue::Array(vec![
            bulk(&self.id),
            self.payload.as_deref().map_or(ValkeyValue::Null, bulk),
            int(self.attempts),
        ])
    }
}

/// A member of pending the run pops: leased when it has a row, a ghost otherwise.
struct Taken {
    id: Str,
    lease: Option<Lease>,
}

/// What a leased job's writes need: its row (the command's held string), its new attempts (the
/// token) and its payload.
struct Lease {
    row: Str,
    att: i64,
    token: Num,
    payload: Option<Str>,
}

/// Steps 4–7 of up to `count` CLAIMs in a row, as one atomic step: every check of every claim
/// is made before the first write (meta and the rate log read once; each head peeked, its row
/// checked and its increment predicted), then all the writes, each claim's exactly CLAIM's.
/// The run stops at the first claim that would claim nothing (paused, pending empty, the rate
/// limit holding it), and, under [`Ghosts::End`], after popping a ghost.
pub fn claim_run(
    h: &Host<'_>,
    q: &Keyspace<'_>,
    call: &Call<'_>,
    lease: i64,
    count: usize,
    ghosts: Ghosts,
) -> Result<Run, Refusal> {
    let (pending, active) = (call.keys[0], call.keys[1]);
    let now = h.now_ms()?;
    let deadline = grammar::at("lease_ms", now, lease)?;
    let started = num(now);
    let idle = || Run {
        taken: Vec::new(),
        stop: Stop::Idle,
    };

    // 4. fence: meta is read first
    let fence = h.fence();
    let meta = q.meta();
    fence.read(&meta)?;

    // 5. reads and checks. Any `paused` value (`0` and empty included) holds the queue; a
    // wrong-typed meta is refused rather than read as paused. The same read gives the
    // queue's event switch and its rate limit (a malformed one refused).
    let (mut switch, mut rate) = (None, None);
    if let Some(mut m) = h.hash(&meta, &["paused", "events", "rate_limit", "rate_window"])? {
        if m.first().is_some_and(Option::is_some) {
            return Ok(idle());
        }
        rate = rate_of(m[2].as_deref(), m[3].as_deref()).map_err(Refusal::Counter)?;
        switch = m.take(1);
    }
    // the heads the ZPOPMINs would pop, peeked (pending's type checked by the read)
    let mut heads = h.heads(pending, count)?.into_iter();
    let Some(mut id) = heads.next() else {
        return Ok(idle());
    };
    // the rate limit: the sliding log's starts within the window (docs/spec.md §13)
    let log = q.rate();
    let (mut recent, mut stale) = (Vec::new(), Vec::new());
    if let Some(rate) = rate {
        fence.read(&log)?;
        let since = now - rate.window;
        let (old, within): (Vec<_>, Vec<_>) =
            h.scores(&log)?.into_iter().partition(|(_, s)| *s <= since);
        recent = within.into_iter().map(|(_, s)| s).collect();
        stale = old.into_iter().map(|(m, _)| m.to_vec()).collect();
    }
    let mut taken = SPARE_TAKEN.with(Shelf::take);
    taken.reserve(heads.len() + 1);
    let (mut leased, mut popped) = (0, 0);
    let mut lessee = None; // the epoch and the event switch, checked at the first lease
    let stop = loop {
        if let Some(wait) = rate.and_then(|rate| rate_wait(rate, &recent, now)) {
            break Stop::Throttled(wait);
        }
        // the head and its row are asked for again by the writes, after every other head's
        // checks: each made once, held for the command
        h.hold_str(&id)?;
        let row = h.hold_leased(&q.row(&id))?;
        fence.read_to_write(&row)?;
        match h.hash(&row, &["attempts", "payload"])? {
            None => {
                taken.push(Taken { id, lease: None });
                if ghosts == Ghosts::End {
                    break Stop::Ghost;
                }
            }
            Some(mut seen) => {
                // a real row: the increment predicted, active able to take the lease (asked at
                // the first lease: nothing is written before the last check, so active's type
                // and the caller's permission on the log answer the same for every lease)
                let att = next_attempt(seen[0].as_deref()).map_err(Refusal::Counter)?;
                let first = lessee.is_none();
                if first {
                    h.expect_zset(active)?;
                }
                fence.write(&row)?;
                if first && rate.is_some() {
                    fence.write(&log)?;
                }
                if first {
                    lessee = Some((h.epoch()?, bus::events_on(h, &fence, q, switch.as_deref())?));
                }
                if rate.is_some() {
                    recent.push(now); // this start counts against the next claim's window
                }
                let payload = seen.take(1);
                let lease = Lease {
                    row,
                    att,
                    token: num(att),
                    payload,
                };
                taken.push(Taken {
                    id,
                    lease: Some(lease),
                });
                leased += 1;
                if leased == count {
                    break Stop::Full;
                }
            }
        }
        popped += 1;
        id = match heads.next() {
            Some(next) => next,
            None => {
                // past the peeked heads (ghosts were among them): peek as far as the run may go
                heads = h.heads(pending, popped + count - leased)?.into_iter();
                match heads.nth(popped) {
                    Some(next) => next,
                    None => break Stop::Idle,
                }
            }
        };
    };

    // 6.–7. writes, each replicated as its effect: every pop verified against its peek, then
    // each leased job's writes as CLAIM's
    let deadline = num(deadline);
    let (run_id, events) = match &lessee {
        Some((run_id, events)) => (*run_id, events.as_ref()),
        None => (&b""[..], None),
    };
    // sized once (a batch's plan is hundreds of ops, each a few hundred bytes): a pop per member
    // taken; per lease its two writes, its event, its two rate-log writes; one ZREM of stale
    // starts
    let per_lease = 2 + usize::from(events.is_some()) + 2 * usize::from(rate.is_some());
    let mut plan = spare_plan(taken.len() + leased * per_lease + 1);
    for t in &taken {
        plan.push(op(Cmd::Zpopmin, &[pending], Expect::Popped(&t.id)));
        let Some(l) = &t.lease else {
            continue;
        };
        // the start: one HSET of the new attempts (predicted from this command's read, as the
        // script's start writes it), the state, the epoch and the start time
        plan.extend([
            op(
                Cmd::Hset,
                &[
                    &l.row,
                    b"attempts",
                    &l.token,
                    b"state",
                    State::Active.field(),
                    b"lease_epoch",
                    run_id,
                    b"started",
                    &started,
                ],
                Expect::AnyInt,
            ),
            op(Cmd::Zadd, &[active, &deadline, &t.id], Expect::AnyInt),
        ]);
        plan.extend(events.map(|ev| ev.op(b"claimed", &t.id, &l.token, &[])));
        // the start logged: the window's stale entries out (the first claim finds them all),
        // this start in, the log's expiry a window from now (an idle queue's log goes by itself)
        if let Some(rate) = rate {
            if !stale.is_empty() {
                let n = stale.len() as i64;
                let members = std::mem::take(&mut stale);
                plan.push(owned_op(
                    Cmd::Zrem,
                    [vec![log.to_vec()], members].concat(),
                    Expect::Int(n),
                ));
            }
            let start = [&t.id[..], b":", &l.token[..]].concat();
            plan.push(owned_op(
                Cmd::Zadd,
                vec![log.to_vec(), started.to_vec(), start],
                Expect::Int(1),
            ));
            plan.push(owned_op(
                Cmd::Pexpireat,
                vec![log.to_vec(), num(now + rate.window).to_vec()],
                Expect::Int(1),
            ));
        }
    }
    let applied = h.apply(&plan);
    recycle_plan(plan);
    let run = Run { taken, stop };
    applied?;
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_vector_is_kept_for_the_next_run_and_an_idle_run_keeps_it_in_place() {
        let run = Run {
            taken: Vec::with_capacity(11),
            stop: Stop::Full,
        };
        let (at, room) = (run.taken.as_ptr() as usize, run.taken.capacity());
        drop(run);
        // an idle run (no head peeked) drops an empty vector: the kept one stays
        drop(Run {
            taken: Vec::new(),
            stop: Stop::Idle,
        });
        let next = SPARE_TAKEN.with(Shelf::take);
        assert_eq!((next.as_ptr() as usize, next.capacity()), (at, room));
        // a run of hundreds is let go
        drop(Run {
            taken: Vec::with_capacity(KEPT_TAKEN_MAX + 1),
            stop: Stop::Full,
        });
        assert_eq!(SPARE_TAKEN.with(Shelf::take).capacity(), 0);
    }
}
