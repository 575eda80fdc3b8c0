//! EMQ.DRAIN: delete up to `limit` jobs from the head of pending (SPEC §9, docs/spec.md
//! "Control verbs").

use valkey_module::{Context, ValkeyResult};

use crate::grammar::{self, Argc};
use crate::host::{int, Host};
use crate::state::State;
use crate::verbs::clear_members;

pub const VERB: &str = "EMQ.DRAIN";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 2;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 2, one ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(1))?;
    // 2. layout: pending, base
    let q = grammar::layout(&call, &["pending"])?;
    // 3. arguments: limit
    let limit = grammar::limit(call.argv[0])?;
    let h = Host::new(ctx, VERB);
    // 4.–7. the head of pending, as ZPOPMIN would serve it, cleared (rows deleted where they
    // are pending; a ghost or a drifted row only leaves pending)
    let members = h.due(call.keys[0], i64::MAX, limit)?;
    let n = clear_members(&h, &q, call.keys[0], &members, State::Pending)?;
    Ok(int(n))
}
