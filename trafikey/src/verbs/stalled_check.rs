//! EMQ.STALLED.CHECK: the sweep of expired leases (SPEC §3, §5 "STALLED.CHECK"). Every
//! selected member gets one verdict (ghost, exempt, recover, die); a lane row, a wrong-typed
//! row or a non-integer `stalled` refuses the whole command before any write.

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use crate::bus;
use crate::decide::{
    self, decide_member, incr, MemberSeen, RowKind, SweepRefusal, Swept, SweptMember,
};
use crate::errors::Refusal;
use crate::grammar::{self, Argc};
use crate::host::{bulk, Host};
use crate::verbs::field;

pub const VERB: &str = "EMQ.STALLED.CHECK";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 4;

/// The row fields the sweep reads, once per member.
const FIELDS: [&str; 5] = ["group", "lease_epoch", "stalled", "priority", "attempts"];

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 4, two ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(2))?;
    // 2. layout: active, pending, dead, base
    let q = grammar::layout(&call, &["active", "pending", "dead"])?;
    let (active, pending, dead) = (call.keys[0], call.keys[1], call.keys[2]);
    // 3. arguments: max_stalled, limit
    let max_stalled = grammar::budget("max_stalled", call.argv[0])?;
    let limit = grammar::limit(call.argv[1])?;
    let h = Host::new(ctx, VERB);
    let now = h.now_ms()?;
    let run_id = h.epoch()?;
    // 4.–5. fence and reads: the expired leases, lowest deadline first (active's type
    // checked by the read), then member by member, each row read as the caller, and the
    // pure verdict
    let fence = h.fence();
    let expired = h.due(active, now, limit)?;
    let mut members = Vec::with_capacity(expired.len());
    let mut attempts = Vec::with_capacity(expired.len());
    for id in expired {
        let row = q.row(&id);
        fence.read(&row)?;
        let (kind, read) = match h.hash(&row, &FIELDS) {
            Ok(Some(r)) => (RowKind::Hash, Some(r)),
            Ok(None) => (RowKind::None, None),
            Err(Refusal::WrongType) => (RowKind::Other, None),
            Err(e) => return Err(e.into()),
        };
        let f = |i: usize| read.as_deref().and_then(|r| field(r, i));
        let seen = MemberSeen {
            row: kind,
            group: f(0).is_some(),
            lease_epoch: f(1),
            stalled: f(2),
        };
        let verdict = decide_member(run_id, max_stalled, &seen).map_err(|r| match r {
            SweepRefusal::WrongType => Refusal::WrongType,
            SweepRefusal::Lane => Refusal::lane(),
            SweepRefusal::Counter(text) => Refusal::Counter(text),
        })?;
        let priority = match verdict {
            Swept::Exempt | Swept::Recover(_) => {
                decide::priority(f(3)).map_err(Refusal::Counter)?
            }
            Swept::Ghost | Swept::Die(_) => 0,
        };
        if verdict != Swept::Ghost {
            fence.write(&row)?;
        }
        attempts.push(f(4).unwrap_or(b"0").to_vec());
        members.push(SweptMember {
            id: id.to_vec(),
            verdict,
            priority,
        });
    }
    // the sets the verdicts write to, and the dead count predicted
    let died = members
        .iter()
        .filter(|m| matches!(m.verdict, Swept::Die(_)))
        .count() as i64;
    let back = members
        .iter()
        .any(|m| matches!(m.verdict, Swept::Exempt | Swept::Recover(_)));
    if back {
        h.expect_zset(pending)?;
    }
    let mut failed_count = None;
    if died > 0 {
        h.expect_zset(dead)?;
        let metrics = q.metrics_failed();
        fence.read(&metrics)?;
        let stored = h.counter(&metrics)?;
        failed_count = Some(incr(stored.as_deref(), died).map_err(Refusal::Counter)?);
        fence.write(&metrics)?;
    }
    let events = if members.is_empty() {
        None
    } else {
        bus::events(&h, &fence, &q)?
    };
    // each death, told to a result waiter (where the caller may publish)
    let mut told = Vec::new();
    for m in members
        .iter()
        .filter(|m| matches!(m.verdict, Swept::Die(_)))
    {
        told.extend(bus::outcome_channel(&fence, &q, &m.id)?);
    }
    // 6.–7. writes, each replicated as its effect, as planned by the pure sweep plan, then
    // each member's events in selection order
    let mut plan = decide::sweep_plan(&q, [active, pending, dead], &members, failed_count, now);
    if let Some(ev) = &events {
        for (m, attempt) in members.iter().zip(&attempts) {
            plan.extend(
                decide::sweep_events(m.verdict)
                    .iter()
                    .map(|(kind, extra)| ev.op(kind, &m.id, attempt, extra)),
            );
        }
    }
    h.apply(&plan)?;
    if back {
        // the queue is claimable: a blocked BCLAIM wakes
        h.signal(pending);
    }
    for channel in &told {
        h.publish(channel, b"dead")?;
    }
    let list = |pick: fn(&Swept) -> bool| {
        ValkeyValue::Array(
            members
                .iter()
                .filter(|m| pick(&m.verdict))
                .map(|m| bulk(&m.id))
                .collect(),
        )
    };
    Ok(ValkeyValue::Array(vec![
        list(|v| matches!(v, Swept::Recover(_))),
        list(|v| matches!(v, Swept::Exempt)),
        list(|v| matches!(v, Swept::Die(_))),
    ]))
}
