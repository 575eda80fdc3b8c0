//! EMQ.BCLAIM: CLAIM, but where CLAIM would answer empty having written nothing (pending
//! empty, or the queue paused) the caller blocks on the queue until a write can serve it or
//! `timeout_ms` passes (SPEC §9.3; docs/spec.md "BCLAIM"). A queue whose rate limit holds the
//! claim answers a `rated` caller the wait at once (it sleeps that long, then claims); a caller
//! that reads no wait blocks as on an empty queue (docs/spec.md §13).
//!
//! It blocks on two keys, pending and schedule. Pending is signalled by every write that makes
//! the queue claimable: core writes that create the zset, the native verbs that add to it, and
//! a resume (a plain `HDEL meta paused`, seen through a keyspace-event subscription). Schedule
//! is signalled when a write brings the next due time earlier. Each wake runs CLAIM's steps
//! 4–7 again from the start ([`claim::claim`]): a job is leased (its effects replicated then),
//! a refusal is answered; still nothing to claim keeps the caller blocked, except after a
//! schedule wake, which answers empty so the caller re-reads the next due time. A timeout
//! answers empty and writes nothing. Inside MULTI or a script it never blocks: it is CLAIM.

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use crate::decide::{bclaim_next, Next, Phase};
use crate::errors::Refusal;
use crate::ffi::{self, native, waker, Wake};
use crate::grammar::{self, Argc, Call, Keyspace};
use crate::host::Host;
use crate::verbs::claim;

pub const VERB: &str = "EMQ.BCLAIM";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 3;

/// BCLAIM's arguments: `lease_ms`, `timeout_ms`, and whether the caller reads a wait.
struct Args {
    lease: i64,
    timeout: i64,
    rated: bool,
}

/// Steps 1–3, at the call and at every wake: shape, layout, then `lease_ms`, `timeout_ms` and
/// the optional `rated` (token `claim.rate`, docs/spec.md §13).
fn parse<'a>(args: &'a [&'a [u8]]) -> Result<(Call<'a>, Keyspace<'a>, Args), Refusal> {
    // 1. shape: numkeys 3, two ARGV and the optional `rated`
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Late(2, 1))?;
    // 2. layout: pending, active, base
    let q = grammar::layout(&call, &["pending", "active"])?;
    // 3. arguments: lease_ms, timeout_ms (0 = no timeout)[, rated]
    let lease = grammar::lease_ms(call.argv[0])?;
    let timeout = grammar::timeout_ms(call.argv[1])?;
    let rated = grammar::rated(call.argv.get(2).copied())?;
    Ok((
        call,
        q,
        Args {
            lease,
            timeout,
            rated,
        },
    ))
}

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    let (call, q, a) = parse(args)?;
    let h = Host::new(ctx, VERB);
    // 4.–7. CLAIM's own steps
    let claimed = claim::claim(&h, &q, &call, a.lease)?;
    let phase = Phase::Called {
        may_block: ffi::may_block(ctx),
    };
    if bclaim_next(claimed.waits(a.rated), phase) != Next::Block {
        return Ok(claimed.reply(a.rated));
    }
    // schedule is a derived key: waiting on it reads it
    let schedule = q.key(b"schedule");
    h.fence().read(&schedule)?;
    h.block(
        &[call.keys[0], &schedule],
        a.timeout,
        waker!(woken),
        native!(timed_out),
    )?;
    Ok(ValkeyValue::NoReply)
}

/// A key the caller waits on was signalled: CLAIM's checks again, from the start.
fn woken(ctx: &Context, args: &[&[u8]], ready: &[u8]) -> Wake {
    let served = || -> Result<Option<ValkeyValue>, Refusal> {
        let (call, q, a) = parse(args)?;
        let h = Host::new(ctx, VERB);
        let claimed = claim::claim(&h, &q, &call, a.lease)?;
        let phase = Phase::Woken {
            by_schedule: ready == &q.key(b"schedule")[..],
        };
        Ok(match bclaim_next(claimed.waits(a.rated), phase) {
            Next::Wait => None,
            Next::Reply | Next::Block => Some(claimed.reply(a.rated)),
        })
    };
    match served() {
        Ok(None) => Wake::Wait,
        Ok(Some(reply)) => Wake::Reply(Ok(reply)),
        Err(refusal) => Wake::Reply(Err(refusal.into())),
    }
}

/// The timeout passed: the empty array, nothing written.
fn timed_out(_ctx: &Context, _args: &[&[u8]]) -> ValkeyResult {
    Ok(ValkeyValue::Array(Vec::new()))
}

/// The keyspace-event classes [`meta_changed`] hears: every way a meta hash can lose its
/// `paused` field (HDEL, DEL/UNLINK, an expiry, an eviction, a rename or a move away, a
/// RESTORE or SET over it).
pub const META_EVENTS: std::ffi::c_int = valkey_module::raw::REDISMODULE_NOTIFY_GENERIC
    | valkey_module::raw::REDISMODULE_NOTIFY_HASH
    | valkey_module::raw::REDISMODULE_NOTIFY_STRING
    | valkey_module::raw::REDISMODULE_NOTIFY_EXPIRED
    | valkey_module::raw::REDISMODULE_NOTIFY_EVICTED;

/// A keyspace event on a queue's meta (any event: a resume is a plain `HDEL meta paused`, and
/// whatever else changed meta, the claimer re-checks it): its pending is signalled, so a
/// claimer blocked on the paused queue wakes and runs CLAIM's checks again (still paused: it
/// keeps waiting; pending empty: the server wakes nobody).
pub fn meta_changed(ctx: &Context, key: &[u8]) {
    let Some(base) = grammar::base_of_meta(key) else {
        return;
    };
    if let Some(pending) = ffi::Str::new(&Keyspace { base }.key(b"pending")) {
        ffi::signal_ready(ctx, &pending);
    }
}
