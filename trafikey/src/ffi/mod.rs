//! Every `unsafe` block of the crate, by concern: the raw module API calls the safe wrappers of
//! `valkey-module` 0.1.14 do not cover (command info with key-specs and ACL categories, the
//! cached clock, ACL checks on a held user, key handles), and the boundaries where the server
//! calls in. Each `unsafe` block says why it is sound (`// SAFETY:`, required by
//! `clippy::undocumented_unsafe_blocks`), each `unsafe fn` what its caller promises
//! (`# Safety`); no other module may hold `unsafe` code (`unsafe_code` is denied outside this
//! one).
//!
//! | module | concern |
//! |---|---|
//! | `registration` | at load: the commands (flags, key-specs, ACL category), the module's options, the keyspace-event subscription |
//! | `dispatch` | where the server calls in: a command, a blocked client's wake, a keyspace event (`catch_unwind` at each); the running command's line, clock and replies |
//! | `strings` | module strings held or borrowed (`Str`), the shared names and a command's recent ones (`Names`) |
//! | `keys` | key handles (`Key`): types, hash, zset and stream reads and writes, expiry, deletion, keyspace notifications and modified-key signals |
//! | `acl` | the calling user and its key and channel permissions (`Caller`) |
//! | `blocking` | blocking a client on keys, signalling a key ready, the key a wake was signalled for |
//! | `replication` | what a command sends beyond its key writes: effects to replicas and the AOF (`RM_Replicate`), messages to a shard channel's subscribers; the write no key handle makes, run with its effect's strings (`RM_Call`) |

#![allow(unsafe_code)]

/// The server's entry point `$name` (`Option` of its function pointer: `None` on a server
/// without it), read from the module API table.
macro_rules! api {
    ($name:ident) => {
        // SAFETY: a plain read of a table entry `RedisModule_Init` wrote once at load, before
        // any command or callback runs, and nothing writes again.
        unsafe { valkey_module::raw::$name }
    };
}

mod acl;
mod blocking;
mod dispatch;
mod keys;
mod registration;
mod replication;
mod strings;

pub use acl::{replicated, Caller};
pub use blocking::{block_on_keys, may_block, signal_ready};
pub use dispatch::{
    dispatch, event, now_ms, reply_array, reply_error, reply_int, reply_null, reply_str, wake,
    Callback, EventHandler, Handler, Wake, WakeHandler,
};
pub(crate) use dispatch::{entry, listener, native, waker};
pub use keys::{key_tag, signal_modified, Key, Kind};
pub use registration::{add_category, register, set_options, subscribe};
pub use replication::{call_int, publish_shard, replicate, Called};
pub use strings::{Names, Str};
