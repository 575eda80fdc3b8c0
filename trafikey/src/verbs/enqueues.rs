//! EMQ.ENQUEUES: ENQUEUE for many (id, payload, priority) triples in one command (docs/spec.md
//! §20). Each triple answers as ENQUEUE would, in order: `1` created, `0` the id already has a
//! row (or was enqueued earlier in this command), or its row's refusal (NOPERM: nothing written
//! for it). Every check of every triple is made before the first write; then each new row's
//! HSET, one ZADD of pending for all of them, each `enqueued` event when on, one signal.

use std::collections::HashSet;

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use crate::bus;
use crate::decide::{new_row, num, Args, Cmd, Expect, Num, Op};
use crate::errors::Refusal;
use crate::ffi::{Kind, Str};
use crate::grammar::{self, Argc};
use crate::host::Host;
use crate::state::State;
use crate::verbs::completes::repeats;
use crate::verbs::reply_each;

pub const VERB: &str = "EMQ.ENQUEUES";
/// KEYS, after the numkeys argument (also the key-spec the table registers): ENQUEUE's.
pub const NUMKEYS: usize = 2;

/// One triple, its arguments checked.
struct Job<'a> {
    id: &'a [u8],
    payload: &'a [u8],
    priority: i64,
    prio: Num,
    /// Its row key, the command's held string (see `Host::hold`): checked, then written after
    /// every other triple's check.
    row: Str,
}

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 2, 1..=1000 (id, payload, priority) triples
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Triples)?;
    // 2. layout: pending, base
    let q = grammar::layout(&call, &["pending"])?;
    let pending = call.keys[0];
    let h = Host::new(ctx, VERB);
    // 3. arguments: each id and priority (payloads are any bytes)
    let jobs: Vec<Job> = call
        .argv
        .chunks_exact(3)
        .map(|t| {
            let priority = grammar::priority(t[2])?;
            let id = grammar::id(t[0])?;
            Ok(Job {
                id,
                payload: t[1],
                priority,
                prio: num(priority),
                row: h.hold(&q.row(id))?,
            })
        })
        .collect::<Result<_, Refusal>>()?;
    let created = num(h.now_ms()?);
    let fence = h.fence();
    // 5. the set every new job joins, checked once: a zset or nothing, else the command is refused
    h.expect_zset(pending)?;
    // 4.–5. each triple's row, in order: read (does it exist?) before it is written; an id with a
    // row of any type, or enqueued earlier in this command, is not enqueued again
    let mut made: Option<HashSet<&[u8]>> = repeats(jobs.iter().map(|j| j.id)).then(HashSet::new);
    let mut answers: Vec<Result<i64, Refusal>> = Vec::with_capacity(jobs.len());
    let mut new: Vec<&Job> = Vec::with_capacity(jobs.len());
    for job in &jobs {
        if made.as_ref().is_some_and(|m| m.contains(job.id)) {
            answers.push(Ok(0));
            continue;
        }
        let fresh = || -> Result<bool, Refusal> {
            fence.read(&job.row)?;
            if h.kind(&job.row)? != Kind::Empty {
                return Ok(false);
            }
            fence.write(&job.row)?;
            Ok(true)
        };
        answers.push(match fresh() {
            Ok(true) => {
                if let Some(m) = made.as_mut() {
                    m.insert(job.id);
                }
                new.push(job);
                Ok(1)
            }
            Ok(false) => Ok(0),
            // an unexpected host answer ends the command; a row the caller may not touch is its
            // triple's answer, as ENQUEUE of it alone would answer
            Err(r @ Refusal::Host(_)) => return Err(r.into()),
            Err(r) => Err(r),
        });
    }
    if !new.is_empty() {
        let events = bus::events(&h, &fence, &q)?;
        // 6.–7. writes, each replicated as its effect: the rows, one ZADD of pending, the events
        let mut plan: Vec<Op> = new
            .iter()
            .map(|j| {
                new_row(
                    &j.row,
                    State::Pending.field(),
                    j.payload,
                    &created,
                    (j.priority, &j.prio),
                    None,
                )
            })
            .collect();
        let mut zadd: Vec<&[u8]> = Vec::with_capacity(1 + 2 * new.len());
        zadd.push(pending);
        for j in &new {
            zadd.extend([&j.prio[..], j.id]);
        }
        plan.push(Op {
            cmd: Cmd::Zadd,
            args: Args::Many(zadd.into_iter().map(std::borrow::Cow::Borrowed).collect()),
            expect: Expect::AnyInt,
        });
        if let Some(ev) = &events {
            let state: &[&[u8]] = &[b"state", State::Pending.field()];
            plan.extend(new.iter().map(|j| ev.op(b"enqueued", j.id, b"0", state)));
        }
        h.apply(&plan)?;
        // the queue is claimable: a blocked BCLAIM wakes
        h.signal(pending);
    }
    reply_each(ctx, answers.iter().map(|a| a.as_ref().copied()));
    Ok(ValkeyValue::NoReply)
}
