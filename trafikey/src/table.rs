//! The registration table: the only list of the EMQ commands. Each row is a command's name,
//! its handler, flags, key-spec and capability tokens; registration and EMQ.VERSION both read
//! it. The handlers here are one-line wrappers with the command's syntax.

use valkey_module::{Context, ValkeyResult};

use crate::ffi::{self, native, Callback};
use crate::verbs;

/// How the server finds a command's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// None (EMQ.VERSION).
    None,
    /// The verb's N keys after its numkeys argument, like EVAL's: `VERB N k1 … kN argv…`.
    /// N is fixed per verb, so the key-spec is the range of argv positions 2..=N+1: the
    /// server's ACL check, COMMAND GETKEYS and cluster routing all read it (a keynum spec
    /// would leave a module command without a legacy key range, and Valkey 9's cluster
    /// routing reads only that one).
    Numkeys(usize),
}

/// Command flags of the writers, of the one writer that may block, and of the one reader.
pub const WRITE: &str = "write deny-oom";
pub const WRITE_BLOCKING: &str = "write deny-oom blocking";
pub const READ: &str = "readonly fast";

/// The module's ACL category: every command is in it, so an operator grants or denies them all
/// at once (`ACL SETUSER worker +@emq`).
pub const CATEGORY: &str = "emq";

/// One registered command.
pub struct Row {
    pub name: &'static str,
    pub callback: Callback,
    pub flags: &'static str,
    pub keys: Keys,
    /// Its ACL categories beyond those its flags imply (`write`, `fast`, …), space-separated.
    pub acl: &'static str,
    pub tokens: &'static [&'static str],
}

impl Row {
    /// The arity given to the server: the verbs take any count and check their own shape
    /// (EMQSHAPE); EMQ.VERSION takes no argument at all.
    pub fn arity(&self) -> i32 {
        match self.keys {
            Keys::None => 1,
            Keys::Numkeys(_) => -1,
        }
    }
}

/// `EMQ.ENQUEUE 2 emq:{q}:pending emq:{q}: <id> <payload> <priority>`
fn enqueue(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::enqueue::run(ctx, args)
}

/// `EMQ.CLAIM 3 emq:{q}:pending emq:{q}:active emq:{q}: <lease_ms> [<rated>]`
fn claim(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::claim::run(ctx, args)
}

/// `EMQ.EXTEND 2 emq:{q}:active emq:{q}: <id> <token> <lease_ms>`
fn extend(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::extend::run(ctx, args)
}

/// `EMQ.EXTENDS 2 emq:{q}:active emq:{q}: <lease_ms> <id> <token> [<id> <token> …]`
fn extends(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::extends::run(ctx, args)
}

/// `EMQ.COMPLETE 2 emq:{q}:active emq:{q}: <id> <token>`
fn complete(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::complete::run(ctx, args)
}

/// `EMQ.SCHEDULE 2 emq:{q}:schedule emq:{q}: <id> <payload> <delay_ms> <priority>`
fn schedule(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::schedule::run(ctx, args)
}

/// `EMQ.PROMOTE 3 emq:{q}:schedule emq:{q}:pending emq:{q}: <limit>`
fn promote(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::promote::run(ctx, args)
}

/// `EMQ.RESCHEDULE 2 emq:{q}:schedule emq:{q}: <id> <delay_ms>`
fn reschedule(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::reschedule::run(ctx, args)
}

/// `EMQ.DELAY 3 emq:{q}:active emq:{q}:schedule emq:{q}: <id> <token> <delay_ms>`
fn delay(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::delay::run(ctx, args)
}

/// `EMQ.FAIL 5 emq:{q}:active emq:{q}:pending emq:{q}:schedule emq:{q}:dead emq:{q}: <id> <token> <error> <max_attempts> <backoff_ms> [<traceback>]`
fn fail(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::fail::run(ctx, args)
}

/// `EMQ.REPROCESS 3 emq:{q}:dead emq:{q}:pending emq:{q}: <id>`
fn reprocess(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::reprocess::run(ctx, args)
}

/// `EMQ.REQUEUE 3 emq:{q}:active emq:{q}:pending emq:{q}: <id> <token>`
fn requeue(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::requeue::run(ctx, args)
}

/// `EMQ.STALLED.CHECK 4 emq:{q}:active emq:{q}:pending emq:{q}:dead emq:{q}: <max_stalled> <limit>`
fn stalled_check(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::stalled_check::run(ctx, args)
}

/// `EMQ.APPEND 2 emq:{q}:active emq:{q}: <id> <token> <progress>`
fn append(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::append::run(ctx, args)
}

/// `EMQ.FAILURES.INCR 5 emq:{q}:active emq:{q}:pending emq:{q}:schedule emq:{q}:dead emq:{q}: <id> <token> <error> <max_attempts> <backoff_ms> [<traceback>]`
fn failures_incr(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::failures_incr::run(ctx, args)
}

/// `EMQ.PUBLISH 2 emq:{q}:active emq:{q}: <id> <token> <result> <retention_ms>`
fn publish(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::publish::run(ctx, args)
}

/// `EMQ.BCLAIM 3 emq:{q}:pending emq:{q}:active emq:{q}: <lease_ms> <timeout_ms> [<rated>]`
fn bclaim(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::bclaim::run(ctx, args)
}

/// `EMQ.REMOVE 4 emq:{q}:pending emq:{q}:schedule emq:{q}:dead emq:{q}: <id>`
fn remove(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::remove::run(ctx, args)
}

/// `EMQ.CANCEL 3 emq:{q}:active emq:{q}:dead emq:{q}: <id>`
fn cancel(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::cancel::run(ctx, args)
}

/// `EMQ.PURGE 2 emq:{q}:dead emq:{q}: <age_ms> <limit>`
fn purge(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::purge::run(ctx, args)
}

/// `EMQ.DRAIN 2 emq:{q}:pending emq:{q}: <limit>`
fn drain(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::drain::run(ctx, args)
}

/// `EMQ.ENQUEUE.UNIQUE 3 emq:{q}:pending emq:{q}:schedule emq:{q}: <id> <payload> <priority> <unique_ms> <replace> [<delay_ms>]`
fn enqueue_unique(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::enqueue_unique::run(ctx, args)
}

/// `EMQ.CLAIMS 3 emq:{q}:pending emq:{q}:active emq:{q}: <lease_ms> <count> [<rated>]`
fn claims(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::claims::run(ctx, args)
}

/// `EMQ.COMPLETES 2 emq:{q}:active emq:{q}: <id> <token> [<id> <token> …]`
fn completes(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::completes::run(ctx, args)
}

/// `EMQ.PUBLISHES 2 emq:{q}:active emq:{q}: <retention_ms> <id> <token> <result> [<id> <token> <result> …]`
fn publishes(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::publishes::run(ctx, args)
}

/// `EMQ.ENQUEUES 2 emq:{q}:pending emq:{q}: <id> <payload> <priority> [<id> <payload> <priority> …]`
fn enqueues(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    verbs::enqueues::run(ctx, args)
}

/// `EMQ.VERSION` — the capability tokens of the registered rows, one space apart.
fn version(_ctx: &Context, _args: &[&[u8]]) -> ValkeyResult {
    Ok(valkey_module::ValkeyValue::BulkString(caps()))
}

macro_rules! row {
    ($verb:ident, [$($token:literal),*]) => {
        row!($verb, [$($token),*], WRITE)
    };
    ($verb:ident, [$($token:literal),*], $flags:expr) => {
        Row {
            name: verbs::$verb::VERB,
            callback: native!($verb),
            flags: $flags,
            keys: Keys::Numkeys(verbs::$verb::NUMKEYS),
            acl: CATEGORY,
            tokens: &[$($token),*],
        }
    };
}

/// Every registered command, in registration order: the job core first, in the order
/// EMQ.VERSION advertises it, then the optional verbs in the order they were added (SPEC §9.4:
/// a wire-6 connection requires only the job core's tokens). A verb row reads its name and its KEYS count from the verb's
/// own file; its handler is the one-line wrapper of the same name above.
pub static TABLE: &[Row] = &[
    row!(enqueue, ["enqueue"]),
    row!(claim, ["claim", "claim.pause"]),
    row!(extend, ["extend"]),
    row!(extends, ["extends"]),
    row!(complete, ["complete.flat"]),
    row!(schedule, ["schedule"]),
    row!(promote, ["promote"]),
    row!(reschedule, ["reschedule"]),
    row!(delay, ["delay"]),
    row!(fail, ["fail.flat"]),
    row!(reprocess, ["reprocess"]),
    row!(requeue, ["requeue"]),
    row!(stalled_check, ["stalled.check"]),
    // the bus verbs (SPEC §6, §9.4: right after the job core)
    row!(append, ["append"]),
    row!(failures_incr, ["failures.incr"]),
    row!(publish, ["publish"]),
    // the optional verbs (SPEC §9.4: after the job core and the bus, in the order they landed)
    row!(bclaim, ["claim.block"], WRITE_BLOCKING),
    row!(remove, ["remove"]),
    row!(cancel, ["cancel"]),
    row!(purge, ["purge"]),
    row!(drain, ["drain"]),
    row!(enqueue_unique, ["enqueue.unique"]),
    // landed after the argument tokens: listed after them (see `caps`)
    row!(claims, ["claims"]),
    row!(completes, ["completes"]),
    row!(publishes, ["publishes"]),
    row!(enqueues, ["enqueues"]),
    Row {
        name: "EMQ.VERSION",
        callback: native!(version),
        flags: READ,
        keys: Keys::None,
        acl: CATEGORY,
        tokens: &[],
    },
];

/// Tokens of arguments added to a registered verb after its row landed (SPEC §9.4): the
/// verb's row keeps its place, and EMQ.VERSION lists these after every row's tokens, in the
/// order they landed. A client sends such an argument only to a module that lists its token.
pub static ARGUMENT_TOKENS: &[&str] = &[
    "fail.traceback", // EMQ.FAIL's sixth ARGV, the failure's traceback (docs/spec.md §11.6)
    "claim.rate", // the queue's rate limit (meta), and CLAIM's and BCLAIM's last ARGV `rated` (§13)
];

/// The last row registered before the argument tokens landed: EMQ.VERSION lists the argument
/// tokens right after its tokens, and the rows after it after them (the order they landed in).
pub const ARGUMENT_TOKENS_AFTER: &str = verbs::enqueue_unique::VERB;

/// EMQ.VERSION's answer: the tokens in the order they landed: the rows' up to
/// [`ARGUMENT_TOKENS_AFTER`], the argument tokens, then the later rows'.
pub fn caps() -> String {
    let split = TABLE
        .iter()
        .position(|r| r.name == ARGUMENT_TOKENS_AFTER)
        .map_or(TABLE.len(), |at| at + 1);
    let tokens = |rows: &'static [Row]| rows.iter().flat_map(|r| r.tokens.iter().copied());
    tokens(&TABLE[..split])
        .chain(ARGUMENT_TOKENS.iter().copied())
        .chain(tokens(&TABLE[split..]))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Register every row (from OnLoad), after the module's ACL category; a server without module
/// ACL categories (before Valkey 8) registers the rows without theirs.
pub fn register(ctx: &Context) -> Result<(), String> {
    let categories = ffi::add_category(ctx, CATEGORY);
    if !categories {
        ctx.log_notice("trafikey: this server has no module ACL categories: no @emq");
    }
    TABLE.iter().try_for_each(|r| {
        let numkeys = match r.keys {
            Keys::None => None,
            Keys::Numkeys(n) => Some(n),
        };
        let acl = categories.then_some(r.acl);
        ffi::register(ctx, r.name, r.callback, r.flags, r.arity(), numkeys, acl)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_pins_the_job_core_tokens_then_the_optional_ones() {
        assert_eq!(
            caps(),
            "enqueue claim claim.pause extend extends complete.flat schedule promote \
             reschedule delay fail.flat reprocess requeue stalled.check \
             append failures.incr publish claim.block remove cancel purge drain enqueue.unique fail.traceback claim.rate claims completes publishes enqueues"
        );
    }

    #[test]
    fn every_verb_has_one_file_and_writes_and_every_row_is_in_the_category() {
        let verbs: Vec<&Row> = TABLE.iter().filter(|r| r.keys != Keys::None).collect();
        assert_eq!(verbs.len(), 26);
        for r in verbs {
            let want = if r.name == "EMQ.BCLAIM" {
                WRITE_BLOCKING
            } else {
                WRITE
            };
            assert_eq!(r.flags, want, "{}", r.name);
            assert!(r.name.starts_with("EMQ."));
            assert!(!r.tokens.is_empty());
        }
        for r in TABLE {
            assert!(r.acl.split(' ').any(|c| c == CATEGORY), "{}", r.name);
        }
        let names: std::collections::HashSet<&str> = TABLE.iter().map(|r| r.name).collect();
        assert_eq!(names.len(), TABLE.len(), "a command is listed twice");
    }
}
