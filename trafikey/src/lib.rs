//! trafikey — EchoMQ's native executor: the job-core verbs of SPEC §3 as Valkey module
//! commands, every check before the first write (SPEC §5).
//!
//! Layout: `table` (the registration table, the only list of commands), `verbs/` (one file
//! per verb), `grammar` and `decide` (pure: argument grammar, integer rules, verdicts and
//! write plans), `epoch` (the run_id), `host` (the calls into the server), `ffi` (all unsafe
//! code, by concern), `errors` (the refusal codes), `kept` (the vectors kept from one command
//! to the next).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// unsafe code lives in `ffi` alone, every block and function with its reason
#![deny(
    unsafe_code,
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc
)]

pub mod bus;
pub mod decide;
pub mod epoch;
pub mod errors;
pub mod ffi;
pub mod grammar;
pub mod host;
pub mod kept;
#[cfg(any(test, feature = "planted"))]
pub mod plant;
pub mod state;
pub mod table;
pub mod verbs;
pub mod version;

/// The package's version and its MODULE LIST number, written by `build.rs` from `echomq/VERSION`.
pub mod release {
    include!(concat!(env!("OUT_DIR"), "/release.rs"));
}

use valkey_module::{valkey_module, Context, ServerInfo, Status, ValkeyString};

/// Module load: read the epoch once, then register the table.
fn init(ctx: &Context, _args: &[ValkeyString]) -> Status {
    let info = ServerInfo::new("server");
    match info.field_c("run_id") {
        Some(run_id) if !run_id.is_empty() => epoch::set(run_id.as_bytes().to_vec()),
        _ => {
            ctx.log_warning("trafikey: INFO server has no run_id");
            return Status::Err;
        }
    }
    if let Err(e) = table::register(ctx) {
        ctx.log_warning(&e);
        return Status::Err;
    }
    // a resume is a plain HDEL on the queue's meta: BCLAIM hears it here
    let heard = ffi::listener!(verbs::bclaim::meta_changed);
    if !ffi::subscribe(ctx, verbs::bclaim::META_EVENTS, heard) {
        ctx.log_warning("trafikey: could not subscribe to keyspace events");
        return Status::Err;
    }
    // the module signals the keys it writes itself (a key handle opened for a write the checks
    // then refuse signals nothing on close). Atomic slot migration is sound to declare: every
    // verb touches the keys of one slot and writes plain effects, the module keeps no state per
    // key or slot (the run_id is the process's), and the keyspace events only wake claimers,
    // who re-check (docs/cluster.md "When slots move")
    if !ffi::set_options(ctx) {
        ctx.log_notice("trafikey: this server has no atomic slot migration");
    }
    ctx.log_notice(&format!("trafikey {} loaded", release::VERSION));
    Status::Ok
}

valkey_module! {
    name: "trafikey",
    version: release::MODULE_VERSION,
    allocator: (valkey_module::alloc::ValkeyAlloc, valkey_module::alloc::ValkeyAlloc),
    data_types: [],
    init: init,
    commands: [],
}
