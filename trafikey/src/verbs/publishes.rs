//! EMQ.PUBLISHES: PUBLISH for many (id, token, result) triples in one command, each result kept
//! the command's `retention_ms` (docs/spec.md §19). Each triple answers as PUBLISH would, in
//! order: `1`, `0` (not held), or the refusal of that job's row, marker or record; every check of
//! every triple is made before the first write, then the completions' writes as COMPLETES makes
//! them ([`settle_batch`]), each job's record after them.

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use crate::decide::num;
use crate::errors::Refusal;
use crate::grammar::{self, Argc, KeyName};
use crate::host::Host;
use crate::verbs::complete::job_checks;
use crate::verbs::completes::{check_each, reply, settle_batch, Tell};
use crate::verbs::publish::{done_checks, done_writes};
use crate::verbs::LeaseCheck;

pub const VERB: &str = "EMQ.PUBLISHES";
/// KEYS, after the numkeys argument (also the key-spec the table registers): PUBLISH's.
pub const NUMKEYS: usize = 2;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 2, retention_ms then 1..=1000 (id, token, result) triples
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::LeadThenTriples)?;
    // 2. layout: active, base
    let q = grammar::layout(&call, &["active"])?;
    let active = call.keys[0];
    // 3. arguments: retention_ms, each id (tokens and results are bytes)
    let retention = grammar::retention(call.argv[0])?;
    let triples: Vec<(&[u8], &[u8], &[u8])> = call.argv[1..]
        .chunks_exact(3)
        .map(|t| Ok((grammar::id(t[0])?, t[1], t[2])))
        .collect::<Result<_, Refusal>>()?;
    let h = Host::new(ctx, VERB);
    let now = h.now_ms()?;
    let (finished, expires) = (num(now), num(grammar::at("retention_ms", now, retention)?));
    let rows: Vec<KeyName> = triples.iter().map(|(id, _, _)| q.row(id)).collect();
    let dones: Vec<KeyName> = match retention {
        0 => Vec::new(),
        _ => triples.iter().map(|(id, _, _)| q.done(id)).collect(),
    };
    let metrics = q.metrics_completed();
    let fence = h.fence();
    // 5. the set every triple leaves, checked once, as COMPLETES checks it
    h.expect_zset(active)?;
    // 4.–5. each triple's own checks, PUBLISH's (its record's included), in order
    let pairs: Vec<(&[u8], &[u8])> = triples.iter().map(|&(id, token, _)| (id, token)).collect();
    let (answers, settles, kept) = check_each(&pairs, &rows, |at, id, token, row| {
        let held = job_checks(
            &h,
            &fence,
            &q,
            (active, row),
            (id, token),
            LeaseCheck::Score,
            &["created", "started"],
        )?;
        let Some((seen, window)) = held else {
            return Ok(None);
        };
        let older = match retention {
            0 => None,
            _ => Some(done_checks(&h, &fence, &dones[at])?),
        };
        Ok(Some(((seen, older, at), window)))
    })?;
    // 4.–7. the queue's checks, the writes (each job's record after the completions'), the
    // outcomes told
    let mut records = Vec::new();
    for (seen, older, at) in &kept {
        if let Some(older) = *older {
            done_writes(
                &mut records,
                (&dones[*at], older),
                (triples[*at].1, triples[*at].2),
                (&finished, &expires),
                seen,
            );
        }
    }
    settle_batch(
        &h,
        &fence,
        &q,
        (active, &metrics),
        &settles,
        records,
        Tell::Always,
    )?;
    reply(ctx, &answers);
    Ok(ValkeyValue::NoReply)
}
