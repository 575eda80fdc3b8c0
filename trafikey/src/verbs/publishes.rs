//! EMQ.PUBLISHES: PUBLISH for many (id, token, result) triples in one command, each result kept
//! the command's `retention_ms` (docs/spec.md §19). Each triple answers as PUBLISH would, in
//! order: `1`, `0` (not held), or the refusal of that job's row, marker or record; every check of
//! every triple is made before the first write, then the completions' writes as COMPLETES makes
//! them ([`settle_batch`]), the records after them: as fields of `done`, one HSETEX for all (one
//! deadline); under `meta results record`, each job's `done:<id>` as PUBLISH writes it.

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use crate::bus;
use crate::decide::{num, Layout};
use crate::errors::Refusal;
use crate::grammar::{self, Argc, KeyName};
use crate::host::Host;
use crate::verbs::complete::job_checks;
use crate::verbs::completes::{check_each, held_rows, reply, settle_batch, Tell};
use crate::verbs::publish::{done_checks, fields_write, pack, record_writes, Kept};
use crate::verbs::LeaseCheck;

pub const VERB: &str = "EMQ.PUBLISHES";
/// KEYS, after the numkeys argument (also the key-spec the table registers): PUBLISH's.
pub const NUMKEYS: usize = 2;

/// The most bytes a packed record's four numbers and their commas take (each an i64's text).
const PACKED_NUMBERS: usize = 4 * (20 + 1);

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
    let rows = held_rows(&h, &q, triples.iter().map(|(id, _, _)| *id))?;
    let metrics = q.metrics_completed();
    let fence = h.fence();
    // 5. the set every triple leaves, checked once, as COMPLETES checks it
    h.expect_zset(active)?;
    // where the records go (`meta results`), read at the first held job's record check; the
    // keys they are written to, by the triple's place (one `done` for all as fields)
    let mut layout: Option<Layout> = None;
    let mut dones: Vec<KeyName> = Vec::new();
    // as fields every record goes to the one `done`: checked once, its answer every held job's
    let mut fields_checked: Option<Result<Kept, Refusal>> = None;
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
        let kept = match retention {
            0 => None,
            _ => {
                let layout = match layout {
                    Some(layout) => layout,
                    None => {
                        let read = bus::results_layout(&h, &fence, &q)?;
                        dones = match read {
                            Layout::Fields => vec![q.done_fields()],
                            Layout::Record => triples.iter().map(|(id, _, _)| q.done(id)).collect(),
                        };
                        *layout.insert(read)
                    }
                };
                Some(match layout {
                    Layout::Fields => fields_checked
                        .get_or_insert_with(|| done_checks(&h, &fence, layout, &dones[0]))
                        .clone()?,
                    Layout::Record => done_checks(&h, &fence, layout, &dones[at])?,
                })
            }
        };
        Ok(Some(((seen, kept, at), window)))
    })?;
    // 4.–7. the queue's checks, the writes (the records after the completions'), the outcomes
    // told
    let mut records = Vec::new();
    // the fields' values packed one after the other in one buffer (sized once: its four
    // numbers and commas take at most PACKED_NUMBERS bytes), each field's id and place
    let results: usize = kept.iter().map(|(_, _, at)| triples[*at].2.len()).sum();
    let mut packs = Vec::with_capacity(results + kept.len() * PACKED_NUMBERS);
    let mut fields = Vec::with_capacity(kept.len());
    for (seen, kept, at) in &kept {
        let (id, token, result) = triples[*at];
        match kept {
            None => {}
            Some(Kept::Field) => {
                fields.push((id, pack(&mut packs, token, &finished, seen, result)))
            }
            Some(Kept::Record { older }) => record_writes(
                &mut records,
                (&dones[*at], *older),
                (token, result),
                (&finished, &expires),
                seen,
            ),
        }
    }
    if !fields.is_empty() {
        let values = fields.iter().map(|(id, at)| (*id, &packs[at.clone()]));
        records.push(fields_write(&dones[0], &expires, values));
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
