//! EMQ.COMPLETES: COMPLETE for many (id, token) pairs in one command (docs/spec.md §18). Each
//! pair answers as COMPLETE would, in order: `1`, `0` (not held), or the refusal of that job's
//! row; every check of every pair is made before the first write, then the completions' writes
//! as one plan ([`completion_plan`]: one ZREM of active, one HINCRBY of the count).

use std::collections::HashSet;

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use crate::bus;
use crate::decide::{num, recycle_plan, spare_plan, Op};
use crate::errors::Refusal;
use crate::ffi::Str;
use crate::grammar::{self, Argc, Keyspace};
use crate::host::{Fence, Host};
use crate::verbs::complete::{completion_plan, job_checks, queue_checks, Settle};
use crate::verbs::{reply_each, LeaseCheck};

pub const VERB: &str = "EMQ.COMPLETES";
/// KEYS, after the numkeys argument (also the key-spec the table registers): COMPLETE's.
pub const NUMKEYS: usize = 2;

/// One pair's answer, as COMPLETE would give it alone (PUBLISHES: a triple's, as PUBLISH).
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// Held: completed (`1`).
    Completed,
    /// No row, another token, or an id this command completed already (`0`).
    NotHeld,
    /// Its row refused (its error reply; nothing written for it).
    Refused(Refusal),
}

/// Which refusals of a pair's own checks are that pair's answer, and which refuse the command:
/// an unexpected host answer (`EMQHOST`) ends it; anything else is about that job's row or
/// marker (its `NOPERM`, `WRONGTYPE`, `EMQSTATE`, `EMQ`), as COMPLETE of it alone would answer.
pub fn pair_refusal(r: Refusal) -> Result<Answer, Refusal> {
    match r {
        Refusal::Host(_) => Err(r),
        other => Ok(Answer::Refused(other)),
    }
}

/// Does an id appear more than once?
pub fn repeats<'a>(ids: impl Iterator<Item = &'a [u8]>) -> bool {
    let mut ids: Vec<&[u8]> = ids.collect();
    ids.sort_unstable();
    ids.windows(2).any(|w| w[0] == w[1])
}

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 2, 1..=1000 (id, token) pairs
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Pairs)?;
    // 2. layout: active, base
    let q = grammar::layout(&call, &["active"])?;
    let active = call.keys[0];
    // 3. arguments: each id (tokens are bytes)
    let pairs: Vec<(&[u8], &[u8])> = call
        .argv
        .chunks_exact(2)
        .map(|p| Ok((grammar::id(p[0])?, p[1])))
        .collect::<Result<_, Refusal>>()?;
    let h = Host::new(ctx, VERB);
    let rows = held_rows(&h, &q, pairs.iter().map(|(id, _)| *id))?;
    let metrics = q.metrics_completed();
    let fence = h.fence();
    // 5. the set every pair leaves, checked once: a zset or nothing, else the command is refused
    // (so a WRONGTYPE among the pairs' checks below is their row's or marker's)
    h.expect_zset(active)?;
    // 4.–5. each pair's own checks, COMPLETE's, in order
    let (answers, settles, _) = check_each(&pairs, &rows, |_, id, token, row| {
        let held = job_checks(
            &h,
            &fence,
            &q,
            (active, row),
            (id, token),
            LeaseCheck::Remove,
            &[],
        )?;
        Ok(held.map(|(_, window)| ((), window)))
    })?;
    // 4.–7. the queue's checks, the writes, the outcomes told while the queue has result waiters
    settle_batch(
        &h,
        &fence,
        &q,
        (active, &metrics),
        &settles,
        Vec::new(),
        Tell::WhileWaited,
    )?;
    reply(ctx, &answers);
    Ok(ValkeyValue::NoReply)
}

/// Each job's row key, as the server string the command holds (see `Host::hold`): a batch
/// checks every row, then writes them, more keys than the recent names keep between. The
/// string the claim that leased it made is reused when it is still kept (`Host::hold_again`).
pub fn held_rows<'i>(
    h: &Host<'_>,
    q: &Keyspace<'_>,
    ids: impl Iterator<Item = &'i [u8]>,
) -> Result<Vec<Str>, Refusal> {
    ids.map(|id| h.hold_again(&q.row(id))).collect()
}

/// A batch's checks: each job's answer, the jobs to settle, and what was kept of each of them.
pub type Checked<'a, K> = (Vec<Answer>, Vec<Settle<'a>>, Vec<K>);

/// Steps 4–5 of a batch: each job's own checks, in order (`check` of its place, id, token and row:
/// `None` when not held, else what the verb keeps of it and its window's writes); an id completed
/// earlier in the command has no row left by then (0).
pub fn check_each<'a, K>(
    pairs: &[(&'a [u8], &'a [u8])],
    rows: &'a [Str],
    mut check: impl FnMut(
        usize,
        &'a [u8],
        &'a [u8],
        &'a [u8],
    ) -> Result<Option<(K, Vec<Op<'static>>)>, Refusal>,
) -> Result<Checked<'a, K>, Refusal> {
    let mut answers = Vec::with_capacity(pairs.len());
    let mut settles: Vec<Settle> = Vec::with_capacity(pairs.len());
    let mut kept = Vec::with_capacity(pairs.len());
    // the ids completed so far, kept only when an id repeats (a batch's ids seldom do)
    let mut completed: Option<HashSet<&[u8]>> =
        repeats(pairs.iter().map(|(id, _)| *id)).then(HashSet::new);
    for (at, (&(id, token), row)) in pairs.iter().zip(rows).enumerate() {
        if completed.as_ref().is_some_and(|done| done.contains(id)) {
            answers.push(Answer::NotHeld);
            continue;
        }
        answers.push(match check(at, id, token, row) {
            Ok(Some((keep, window))) => {
                if let Some(done) = completed.as_mut() {
                    done.insert(id);
                }
                settles.push(Settle {
                    id,
                    token,
                    row,
                    window,
                });
                kept.push(keep);
                Answer::Completed
            }
            Ok(None) => Answer::NotHeld,
            Err(r) => pair_refusal(r)?,
        });
    }
    Ok((answers, settles, kept))
}

/// When a batch's outcomes are told on their channels.
pub enum Tell {
    /// Always (PUBLISHES, as PUBLISH).
    Always,
    /// Only while the queue has result waiters (COMPLETES, as COMPLETE).
    WhileWaited,
}

/// Steps 4–7 of a batch whose jobs passed their own checks: the queue's checks for all of them
/// (a refusal there refuses the command), each outcome's channel when it is told, then the
/// completions' writes ([`completion_plan`]) and the verb's `more` after them, each replicated as
/// its effect; then the outcomes, told.
pub fn settle_batch<'a>(
    h: &Host<'_>,
    fence: &Fence<'_>,
    q: &Keyspace<'_>,
    (active, metrics): (&'a [u8], &'a [u8]),
    settles: &[Settle<'a>],
    more: Vec<Op<'a>>,
    tell: Tell,
) -> Result<(), Refusal> {
    if settles.is_empty() {
        return Ok(());
    }
    let n = num(settles.len() as i64);
    let (count, events, waited) = queue_checks(h, fence, q, metrics, settles.len() as i64)?;
    let mut channels = Vec::new();
    if waited || matches!(tell, Tell::Always) {
        channels.reserve_exact(settles.len());
        for s in settles {
            channels.extend(bus::outcome_channel(fence, q, s.id)?);
        }
    }
    let mut plan = completion_plan(
        spare_plan(0),
        (active, metrics),
        (count, &n),
        events.as_ref(),
        settles,
    );
    plan.extend(more);
    h.apply(&plan)?;
    recycle_plan(plan);
    for channel in &channels {
        h.publish(channel, b"completed")?;
    }
    Ok(())
}

/// The reply: one element per pair, in order.
pub fn reply(ctx: &Context, answers: &[Answer]) {
    reply_each(
        ctx,
        answers.iter().map(|answer| match answer {
            Answer::Completed => Ok(1),
            Answer::NotHeld => Ok(0),
            Answer::Refused(r) => Err(r),
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::NOT_INTEGER;

    #[test]
    fn repeats_finds_an_id_in_two_pairs() {
        let ids = |ids: &[&'static str]| ids.iter().map(|id| id.as_bytes()).collect::<Vec<_>>();
        assert!(!repeats(ids(&["a"]).into_iter()));
        assert!(!repeats(ids(&["b", "a", "c"]).into_iter()));
        assert!(repeats(ids(&["b", "a", "b"]).into_iter()));
        assert!(repeats(ids(&["a", "a"]).into_iter()));
    }

    #[test]
    fn a_refusal_of_a_pair_is_its_answer_and_a_host_fault_ends_the_command() {
        for r in [
            Refusal::State("EMQ.COMPLETES row is pending, not active".into()),
            Refusal::lane(),
            Refusal::flow(),
            Refusal::WrongType,
            Refusal::NoPerm("x".into()),
            Refusal::Counter(NOT_INTEGER),
        ] {
            assert_eq!(pair_refusal(r.clone()), Ok(Answer::Refused(r)));
        }
        let host = Refusal::Host("EMQ.COMPLETES could not open a key".into());
        assert_eq!(pair_refusal(host.clone()), Err(host));
    }
}
