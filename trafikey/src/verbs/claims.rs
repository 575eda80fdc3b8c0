//! EMQ.CLAIMS: up to `count` CLAIMs in a row in one command (docs/spec.md §3, "CLAIMS"). A
//! ghost at the head is popped and passed over, uncounted; the run stops at the first claim
//! that would claim nothing (paused, pending empty, the rate limit holding it). Every check of
//! every claim is made before the first write ([`claim::claim_run`]).

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use crate::ffi;
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
    // the reply: each leased job's CLAIM reply, then the wait when there is one
    let wait = wait(run.stop, rated);
    ffi::reply_array(ctx, run.leased() + usize::from(wait.is_some()));
    run.reply_jobs(ctx);
    if let Some(wait) = wait {
        ffi::reply_int(ctx, wait);
    }
    Ok(ValkeyValue::NoReply)
}

/// The wait CLAIMS' reply ends with: when the rate limit stopped the run and the caller is
/// `rated` (CLAIM's reply for the claim it held).
fn wait(stop: Stop, rated: bool) -> Option<i64> {
    match (stop, rated) {
        (Stop::Throttled(wait), true) => Some(wait),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_run_ends_with_its_wait_for_a_rated_caller_only() {
        assert_eq!(wait(Stop::Throttled(250), true), Some(250));
        assert_eq!(wait(Stop::Throttled(250), false), None);
        for stop in [Stop::Full, Stop::Idle, Stop::Ghost] {
            assert_eq!(wait(stop, true), None, "{stop:?}");
        }
    }
}
