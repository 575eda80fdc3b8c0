//! EMQ.CLAIMS: up to `count` CLAIMs in a row in one command (docs/spec.md §3, "CLAIMS"). A
//! ghost at the head is popped and passed over, uncounted; the run stops at the first claim
//! that would claim nothing (paused, pending empty, the rate limit holding it). Every check of
//! every claim is made before the first write ([`claim::claim_run`]).

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use crate::grammar::{self, Argc};
use crate::host::Host;
use crate::verbs::claim::{self, Ghosts, Stop};

pub const VERB: &str = "EMQ.CLAIMS";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 3;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 3, two ARGV and CLAIM's optional `rated`
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Late(2, 1))?;
    // 2. layout: pending, active, base
    let q = grammar::layout(&call, &["pending", "active"])?;
    // 3. arguments: lease_ms, count[, rated]
    let lease = grammar::lease_ms(call.argv[0])?;
    let count = grammar::claims_count(call.argv[1])?;
    let rated = grammar::rated(call.argv.get(2).copied())?;
    // 4.–7. CLAIM's steps, for each job of the run
    let run = claim::claim_run(&Host::new(ctx, VERB), &q, &call, lease, count, Ghosts::Skip)?;
    Ok(ValkeyValue::Array(reply(run.jobs, run.stop, rated)))
}

/// CLAIMS' reply: each leased job's CLAIM reply, then, when the rate limit stopped the run and
/// the caller is `rated`, the wait (CLAIM's reply for the claim it held).
fn reply<T: From<i64>>(mut jobs: Vec<T>, stop: Stop, rated: bool) -> Vec<T> {
    if let (Stop::Throttled(wait), true) = (stop, rated) {
        jobs.push(T::from(wait));
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_run_ends_with_its_wait_for_a_rated_caller_only() {
        assert_eq!(
            reply(vec![7i64, 8], Stop::Throttled(250), true),
            [7, 8, 250]
        );
        assert_eq!(reply(vec![7i64], Stop::Throttled(250), false), [7]);
        assert_eq!(reply(Vec::<i64>::new(), Stop::Throttled(1), true), [1]);
        for stop in [Stop::Full, Stop::Idle, Stop::Ghost] {
            assert_eq!(reply(vec![7i64], stop, true), [7], "{stop:?}");
        }
        assert!(reply(Vec::<i64>::new(), Stop::Idle, true).is_empty());
    }
}
