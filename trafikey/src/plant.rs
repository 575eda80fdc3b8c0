//! Planted defects for the parity instrument (SPEC §8). This module exists only in a build
//! with `--features planted` (and in `cargo test`, which tests the alterations); a release
//! build has neither it nor any planted branch.
//!
//! A plant alters a verb's write plan at the one point every plan is carried out
//! (`Host::apply`): no verb body mentions plants. Each plant names the verbs whose plans it
//! alters and how, as a pure function of the plan. The switch is the environment variable
//! `TRAFIKEY_PLANT`, read once, at the first plan carried out: it names at most one defect. The
//! instrument (`python -m echomq.parity --plants`) starts a server with one name at a time and
//! must report the defect as UNEXPECTED; the names and their verbs are listed in
//! `echomq/parity/plants.py`.

use std::borrow::Cow;
use std::sync::OnceLock;

use crate::decide::{Args, Cmd, Expect, Op};

/// One planted defect: its name (the value of `TRAFIKEY_PLANT`), the verbs whose plans it
/// alters, and the alteration (the plan and the command's clock in ms).
pub struct Plant {
    pub name: &'static str,
    pub verbs: &'static [&'static str],
    pub alter: fn(&mut Vec<Op<'_>>, i64),
}

const CLAIMS: &[&str] = &["EMQ.CLAIM", "EMQ.BCLAIM", "EMQ.CLAIMS"];

/// Every plant, by name.
pub static PLANTS: &[Plant] = &[
    // admission: the row forgets its priority (pending still gets the score)
    Plant {
        name: "enqueue.forget_priority",
        verbs: &["EMQ.ENQUEUE"],
        alter: |plan, _| forget_field(plan, b"priority"),
    },
    // admission: the row forgets its unique window
    Plant {
        name: "enqueue_unique.forget_window",
        verbs: &["EMQ.ENQUEUE.UNIQUE"],
        alter: |plan, _| forget_field(plan, b"unique"),
    },
    // claim: the lease is stamped with an empty epoch, not the run_id
    Plant {
        name: "claim.blank_epoch",
        verbs: CLAIMS,
        alter: |plan, _| stamp_field(plan, b"lease_epoch", b""),
    },
    // claim: the rate limit is checked but no start is logged, so it holds nothing
    Plant {
        name: "claim.rate_unlogged",
        verbs: CLAIMS,
        alter: |plan, _| plan.retain(|op| !(writes(op, b":rate") && op.cmd != Cmd::Zrem)),
    },
    // lease: a renewal stamps the lease with an epoch that is not this server's run_id
    Plant {
        name: "epoch.stale",
        verbs: &["EMQ.EXTEND", "EMQ.EXTENDS"],
        alter: |plan, _| stamp_field(plan, b"lease_epoch", &[b'0'; 40]),
    },
    // settle: the completion is not counted
    Plant {
        name: "complete.no_metric",
        verbs: &["EMQ.COMPLETE", "EMQ.COMPLETES"],
        alter: |plan, _| drop_first(plan, Cmd::Hincrby, b":metrics:completed"),
    },
    // schedule: the new due time ignores delay_ms (the reply still names the right one)
    Plant {
        name: "reschedule.ignore_delay",
        verbs: &["EMQ.RESCHEDULE"],
        alter: |plan, now| {
            if let Some(zadd) = plan.iter_mut().find(|op| op.cmd == Cmd::Zadd) {
                set_arg(zadd, 1, crate::decide::num(now).to_vec());
            }
        },
    },
    // recovery: the job is sent to pending but left in dead too (a ghost is still removed)
    Plant {
        name: "reprocess.keep_dead",
        verbs: &["EMQ.REPROCESS"],
        alter: |plan, _| {
            if plan.iter().any(|op| op.cmd == Cmd::Zadd) {
                drop_first(plan, Cmd::Zrem, b":dead");
            }
        },
    },
    // operator: the cancelled job is not counted
    Plant {
        name: "cancel.no_metric",
        verbs: &["EMQ.CANCEL"],
        alter: |plan, _| drop_first(plan, Cmd::Hincrby, b":metrics:failed"),
    },
    // bus: the completed record is kept forever: its field written with HSET, no PXAT (under
    // `meta results record`, `done:<id>` without its PEXPIREAT)
    Plant {
        name: "publish.keep_forever",
        verbs: &["EMQ.PUBLISH", "EMQ.PUBLISHES"],
        alter: |plan, _| {
            plan.retain(|op| !(op.cmd == Cmd::Pexpireat && key_has(op, b":done:")));
            for op in plan.iter_mut().filter(|op| op.cmd == Cmd::Hsetex) {
                *op = without_expiry(op);
            }
        },
    },
];

static SWITCHED_ON: OnceLock<Option<&'static Plant>> = OnceLock::new();

/// The plant `TRAFIKEY_PLANT` names, read once; none when unset, empty or unknown.
fn switched_on() -> Option<&'static Plant> {
    *SWITCHED_ON.get_or_init(|| {
        let name = std::env::var("TRAFIKEY_PLANT").ok()?;
        PLANTS.iter().find(|p| p.name == name)
    })
}

/// The plan `verb` carries out with `plant` on: altered when the plant is the verb's, else
/// `None` (the plan as it is).
pub fn altered<'a>(plant: &Plant, verb: &str, plan: &[Op<'a>], now: i64) -> Option<Vec<Op<'a>>> {
    if !plant.verbs.contains(&verb) {
        return None;
    }
    let mut plan = plan.to_vec();
    (plant.alter)(&mut plan, now);
    Some(plan)
}

/// The hook `Host::apply` calls on every plan: the plan altered by the plant switched on, if it
/// is this verb's.
pub fn alter<'a>(verb: &str, plan: &[Op<'a>], now: i64) -> Option<Vec<Op<'a>>> {
    altered(switched_on()?, verb, plan, now)
}

/// An `HSETEX key PXAT <ms> FIELDS n f v …` as the `HSET key f v …` of the same fields.
fn without_expiry(op: &Op<'_>) -> Op<'static> {
    let fields = op.args.iter().take(1).chain(op.args.iter().skip(5));
    Op {
        cmd: Cmd::Hset,
        args: Args::Many(fields.map(|a| Cow::Owned(a.to_vec())).collect()),
        expect: Expect::AnyInt,
    }
}

/// Does `op` write a key that ends with `suffix`?
fn writes(op: &Op<'_>, suffix: &[u8]) -> bool {
    op.args.first().is_some_and(|key| key.ends_with(suffix))
}

/// Does `op`'s key contain `part`?
fn key_has(op: &Op<'_>, part: &[u8]) -> bool {
    op.args
        .first()
        .is_some_and(|key| key.windows(part.len()).any(|w| w == part))
}

/// Remove the first `cmd` on a key ending with `suffix`.
fn drop_first(plan: &mut Vec<Op<'_>>, cmd: Cmd, suffix: &[u8]) {
    if let Some(at) = plan
        .iter()
        .position(|op| op.cmd == cmd && writes(op, suffix))
    {
        plan.remove(at);
    }
}

/// The position of `field` among an HSET's field names (1, 3, 5, …), if it writes it.
fn field_at(op: &Op<'_>, field: &[u8]) -> Option<usize> {
    if op.cmd != Cmd::Hset {
        return None;
    }
    (1..op.args.len())
        .step_by(2)
        .find(|&i| op.args.get(i) == Some(field))
}

/// An op's arguments replaced by owned copies of `args` (a planted build's cost).
fn with_args<'a>(op: &Op<'a>, args: Vec<Vec<u8>>, expect: Expect<'a>) -> Op<'a> {
    Op {
        cmd: op.cmd,
        args: Args::Many(args.into_iter().map(Cow::Owned).collect()),
        expect,
    }
}

/// Set argument `i` of `op` to `value`.
fn set_arg(op: &mut Op<'_>, i: usize, value: Vec<u8>) {
    let mut args: Vec<Vec<u8>> = op.args.iter().map(<[u8]>::to_vec).collect();
    if let Some(slot) = args.get_mut(i) {
        *slot = value;
    }
    *op = with_args(op, args, op.expect.clone());
}

/// Every HSET that writes `field` writes `value` for it instead.
fn stamp_field(plan: &mut [Op<'_>], field: &[u8], value: &[u8]) {
    for op in plan {
        if let Some(at) = field_at(op, field) {
            set_arg(op, at + 1, value.to_vec());
        }
    }
}

/// The first HSET that writes `field` leaves it out (a new field: one fewer created).
fn forget_field(plan: &mut [Op<'_>], field: &[u8]) {
    let Some((op, at)) = plan
        .iter_mut()
        .find_map(|op| field_at(op, field).map(|at| (op, at)))
    else {
        return;
    };
    let mut args: Vec<Vec<u8>> = op.args.iter().map(<[u8]>::to_vec).collect();
    args.drain(at..at + 2);
    let expect = match op.expect {
        Expect::Int(n) => Expect::Int(n - 1),
        ref other => other.clone(),
    };
    *op = with_args(op, args, expect);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::{new_row, op, owned_op};

    fn plant(name: &str) -> &'static Plant {
        PLANTS.iter().find(|p| p.name == name).expect(name)
    }

    fn args(op: &Op<'_>) -> Vec<Vec<u8>> {
        op.args.iter().map(<[u8]>::to_vec).collect()
    }

    #[test]
    fn every_plant_has_a_unique_name_and_verbs() {
        let mut names: Vec<&str> = PLANTS.iter().map(|p| p.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PLANTS.len());
        let table: Vec<&str> = crate::table::TABLE.iter().map(|r| r.name).collect();
        for p in PLANTS {
            assert!(!p.verbs.is_empty(), "{}", p.name);
            for verb in p.verbs {
                assert!(table.contains(verb), "{}: {verb} is not registered", p.name);
            }
        }
    }

    #[test]
    fn a_plant_leaves_other_verbs_plans_alone() {
        let plan = [op(
            Cmd::Hincrby,
            &[b"emq:{q}:metrics:completed", b"count", b"1"],
            Expect::Int(1),
        )];
        assert!(altered(plant("complete.no_metric"), "EMQ.PUBLISH", &plan, 0).is_none());
        let kept = altered(plant("complete.no_metric"), "EMQ.COMPLETE", &plan, 0).unwrap();
        assert!(kept.is_empty());
    }

    #[test]
    fn forgetting_a_field_takes_its_pair_and_one_new_field() {
        let row = new_row(b"emq:{q}:job:a", b"pending", b"p", b"5", (7, b"7"), None);
        assert_eq!(row.expect, Expect::Int(5));
        let plan = altered(plant("enqueue.forget_priority"), "EMQ.ENQUEUE", &[row], 0).unwrap();
        assert_eq!(plan[0].expect, Expect::Int(4));
        assert!(!args(&plan[0]).contains(&b"priority".to_vec()));
        assert!(!args(&plan[0]).contains(&b"7".to_vec()));
    }

    #[test]
    fn a_stamp_writes_the_planted_epoch() {
        let hset = op(
            Cmd::Hset,
            &[b"emq:{q}:job:a", b"attempts", b"2", b"lease_epoch", b"abc"],
            Expect::AnyInt,
        );
        let blank = altered(
            plant("claim.blank_epoch"),
            "EMQ.CLAIMS",
            std::slice::from_ref(&hset),
            0,
        )
        .unwrap();
        assert_eq!(args(&blank[0])[4], b"");
        let stale = altered(plant("epoch.stale"), "EMQ.EXTEND", &[hset], 0).unwrap();
        assert_eq!(args(&stale[0])[4], vec![b'0'; 40]);
    }

    #[test]
    fn the_rate_log_gets_no_start() {
        let plan = [
            op(Cmd::Zadd, &[b"emq:{q}:active", b"9", b"a"], Expect::AnyInt),
            owned_op(
                Cmd::Zrem,
                vec![b"emq:{q}:rate".to_vec(), b"old".to_vec()],
                Expect::Int(1),
            ),
            owned_op(
                Cmd::Zadd,
                vec![b"emq:{q}:rate".to_vec(), b"5".to_vec(), b"a:1".to_vec()],
                Expect::Int(1),
            ),
            owned_op(
                Cmd::Pexpireat,
                vec![b"emq:{q}:rate".to_vec(), b"9".to_vec()],
                Expect::Int(1),
            ),
        ];
        let kept = altered(plant("claim.rate_unlogged"), "EMQ.CLAIM", &plan, 0).unwrap();
        let cmds: Vec<Cmd> = kept.iter().map(|o| o.cmd).collect();
        assert_eq!(cmds, [Cmd::Zadd, Cmd::Zrem]);
    }

    #[test]
    fn reschedule_is_due_now_and_reprocess_keeps_dead_only_for_a_row() {
        let zadd = [op(
            Cmd::Zadd,
            &[b"emq:{q}:schedule", b"900", b"a"],
            Expect::Int(0),
        )];
        let now = altered(
            plant("reschedule.ignore_delay"),
            "EMQ.RESCHEDULE",
            &zadd,
            42,
        )
        .unwrap();
        assert_eq!(args(&now[0])[1], b"42");
        let ghost = [op(Cmd::Zrem, &[b"emq:{q}:dead", b"a"], Expect::Int(1))];
        let kept = altered(plant("reprocess.keep_dead"), "EMQ.REPROCESS", &ghost, 0).unwrap();
        assert_eq!(kept.len(), 1);
        let moved = [
            ghost[0].clone(),
            op(Cmd::Zadd, &[b"emq:{q}:pending", b"0", b"a"], Expect::AnyInt),
        ];
        let kept = altered(plant("reprocess.keep_dead"), "EMQ.REPROCESS", &moved, 0).unwrap();
        assert_eq!(kept.iter().map(|o| o.cmd).collect::<Vec<_>>(), [Cmd::Zadd]);
    }

    #[test]
    fn the_record_keeps_no_expiry() {
        let plan = [
            op(
                Cmd::Hset,
                &[b"emq:{q}:done:a", b"result", b"r"],
                Expect::AnyInt,
            ),
            op(Cmd::Pexpireat, &[b"emq:{q}:done:a", b"9"], Expect::Int(1)),
        ];
        let kept = altered(plant("publish.keep_forever"), "EMQ.PUBLISH", &plan, 0).unwrap();
        assert_eq!(kept.iter().map(|o| o.cmd).collect::<Vec<_>>(), [Cmd::Hset]);
    }

    #[test]
    fn the_field_keeps_no_expiry() {
        let plan = [
            op(Cmd::Zrem, &[b"emq:{q}:active", b"a", b"b"], Expect::Int(2)),
            op(
                Cmd::Hsetex,
                &[
                    b"emq:{q}:done",
                    b"PXAT",
                    b"9",
                    b"FIELDS",
                    b"2",
                    b"a",
                    b"1,5,,,ra",
                    b"b",
                    b"1,5,,,rb",
                ],
                Expect::Int(1),
            ),
        ];
        let kept = altered(plant("publish.keep_forever"), "EMQ.PUBLISHES", &plan, 0).unwrap();
        assert_eq!(kept[0], plan[0]);
        assert_eq!(kept[1].cmd, Cmd::Hset);
        assert_eq!(kept[1].expect, Expect::AnyInt);
        assert_eq!(
            args(&kept[1]),
            [
                b"emq:{q}:done".to_vec(),
                b"a".to_vec(),
                b"1,5,,,ra".to_vec(),
                b"b".to_vec(),
                b"1,5,,,rb".to_vec()
            ]
        );
    }
}
