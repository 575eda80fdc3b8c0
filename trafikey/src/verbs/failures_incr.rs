//! EMQ.FAILURES.INCR: FAIL with the bus, in one step: FAIL's arguments (the traceback
//! optional, as FAIL's sixth) and FAIL's move, run by FAIL's own code ([`fail::settle`]): the
//! failure counted (`failures + 1`, the budget FAIL caps on) and recorded, the `failed` event
//! then `retried` or `dead` when the queue's events are on, a blocked BCLAIM signalled when the
//! job is claimable, and `dead` on the job's outcome channel when it dies (docs/spec.md §12).

use valkey_module::{Context, ValkeyResult};

use crate::verbs::fail;

pub const VERB: &str = "EMQ.FAILURES.INCR";
/// KEYS, after the numkeys argument (also the key-spec the table registers): FAIL's.
pub const NUMKEYS: usize = fail::NUMKEYS;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    fail::settle(ctx, args, VERB, true)
}
