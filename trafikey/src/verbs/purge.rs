//! EMQ.PURGE: delete up to `limit` dead jobs that died at least `age_ms` ago, oldest first
//! (the dead score is the time a job died). SPEC §9, docs/spec.md "Control verbs".

use valkey_module::{Context, ValkeyResult};

use crate::grammar::{self, Argc};
use crate::host::{int, Host};
use crate::state::State;
use crate::verbs::clear_members;

pub const VERB: &str = "EMQ.PURGE";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 2;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 2, two ARGV
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::Exact(2))?;
    // 2. layout: dead, base
    let q = grammar::layout(&call, &["dead"])?;
    // 3. arguments: age_ms, limit
    let age = grammar::delay("age_ms", call.argv[0])?;
    let limit = grammar::limit(call.argv[1])?;
    let h = Host::new(ctx, VERB);
    // now − age_ms cannot leave i64: both are ≥ 0
    let before = h.now_ms()? - age;
    // 4.–7. the members that died by then, lowest score first, cleared (rows deleted where
    // they are dead; a ghost or a drifted row only leaves dead)
    let members = h.due(call.keys[0], before, limit)?;
    let n = clear_members(&h, &q, call.keys[0], &members, State::Dead)?;
    Ok(int(n))
}
