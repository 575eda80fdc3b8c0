//! Host glue: the only place the verbs touch the server. Reads go through read-only key
//! handles (no command path) or `call_ext` (replies read as bytes); writes go through
//! `call_ext` with the replicate option, so their effects (not the verb) reach replicas and
//! the AOF, wrapped by the server in one MULTI/EXEC per command.

use std::sync::OnceLock;

use valkey_module::{
    CallOptions, CallOptionsBuilder, CallReply, CallResult, Context, ValkeyError, ValkeyValue,
};

use crate::decide::{Expect, Op};
use crate::errors::{printable, Refusal};
use crate::ffi::{self, Caller, Kind, ReadKey};

/// A host reply, owned and binary-safe.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Int(i64),
    Bulk(Vec<u8>),
    Null,
    Array(Vec<Reply>),
    Other,
}

fn own(r: &CallReply<'_>) -> Reply {
    match r {
        CallReply::I64(i) => Reply::Int(i.to_i64()),
        CallReply::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        CallReply::Null(_) => Reply::Null,
        CallReply::Array(a) => Reply::Array(
            a.iter()
                .map(|e| match e {
                    Ok(c) => own(&c),
                    Err(_) => Reply::Other,
                })
                .collect(),
        ),
        _ => Reply::Other,
    }
}

fn read_options() -> &'static CallOptions {
    static O: OnceLock<CallOptions> = OnceLock::new();
    O.get_or_init(|| CallOptionsBuilder::new().errors_as_replies().build())
}

fn write_options() -> &'static CallOptions {
    static O: OnceLock<CallOptions> = OnceLock::new();
    O.get_or_init(|| {
        CallOptionsBuilder::new()
            .errors_as_replies()
            .replicate()
            .build()
    })
}

/// One verb's view of the server.
pub struct Host<'c> {
    pub ctx: &'c Context,
    pub verb: &'static str,
}

/// Read or write access to a derived key (ACL key permission bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

impl<'c> Host<'c> {
    pub fn new(ctx: &'c Context, verb: &'static str) -> Self {
        Host { ctx, verb }
    }

    fn host_error(&self, what: &str) -> Refusal {
        Refusal::Host(format!("{} {what}", self.verb))
    }

    /// The server's cached clock, read once per command.
    pub fn now_ms(&self) -> Result<i64, Refusal> {
        ffi::now_ms().ok_or_else(|| self.host_error("has no clock"))
    }

    /// The epoch (`run_id`) read at load.
    pub fn epoch(&self) -> Result<&'static [u8], Refusal> {
        crate::epoch::current().ok_or_else(|| self.host_error("has no run_id"))
    }

    /// Check 4, the fence: the caller, held for this command's derived-key checks.
    pub fn fence(&self) -> Fence {
        Fence {
            caller: Caller::of(self.ctx),
            verb: self.verb,
        }
    }

    /// A read through the command path; a WRONGTYPE answer is the WRONGTYPE refusal.
    pub fn read(&self, cmd: &str, args: &[&[u8]]) -> Result<Reply, Refusal> {
        let r: CallResult<'static> = self.ctx.call_ext(cmd, read_options(), args);
        match r {
            Ok(reply) => Ok(own(&reply)),
            Err(e) if e.as_bytes().starts_with(b"WRONGTYPE") => Err(Refusal::WrongType),
            Err(e) => Err(self.host_error(&format!("{cmd} answered {}", printable(e.as_bytes())))),
        }
    }

    /// The members of a zset with score ≤ `max`, lowest first, at most `limit`.
    pub fn due(&self, key: &[u8], max: i64, limit: i64) -> Result<Vec<Vec<u8>>, Refusal> {
        let max = max.to_string();
        let limit = limit.to_string();
        let args: [&[u8]; 7] = [
            key,
            b"-inf",
            max.as_bytes(),
            b"BYSCORE",
            b"LIMIT",
            b"0",
            limit.as_bytes(),
        ];
        self.members("ZRANGE", &args)
    }

    /// The lowest member of a zset, as ZPOPMIN would pop it.
    pub fn head(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Refusal> {
        Ok(self
            .members("ZRANGE", &[key, b"0", b"0"])?
            .into_iter()
            .next())
    }

    fn members(&self, cmd: &str, args: &[&[u8]]) -> Result<Vec<Vec<u8>>, Refusal> {
        match self.read(cmd, args)? {
            Reply::Array(items) => items
                .into_iter()
                .map(|i| match i {
                    Reply::Bulk(b) => Ok(b),
                    _ => Err(self.host_error(&format!("{cmd} answered a non-bulk member"))),
                })
                .collect(),
            _ => Err(self.host_error(&format!("{cmd} answered a non-array"))),
        }
    }

    fn open(&self, key: &[u8]) -> Result<ReadKey, Refusal> {
        ReadKey::open(self.ctx, key).ok_or_else(|| self.host_error("could not open a key"))
    }

    /// What `key` holds.
    pub fn kind(&self, key: &[u8]) -> Result<Kind, Refusal> {
        Ok(self.open(key)?.kind())
    }

    /// A key the verb will ZADD/ZREM: a zset or nothing.
    pub fn expect_zset(&self, key: &[u8]) -> Result<(), Refusal> {
        match self.kind(key)? {
            Kind::Empty | Kind::Zset => Ok(()),
            _ => Err(Refusal::WrongType),
        }
    }

    /// Is `member` in the zset `key` (a zset or nothing, else WRONGTYPE)?
    pub fn in_zset(&self, key: &[u8], member: &[u8]) -> Result<bool, Refusal> {
        let k = self.open(key)?;
        match k.kind() {
            Kind::Empty => Ok(false),
            Kind::Zset => Ok(k.zscore(member).is_some()),
            _ => Err(Refusal::WrongType),
        }
    }

    /// A hash's fields, in order: `None` when the key does not exist, WRONGTYPE when it is
    /// not a hash.
    pub fn hash(
        &self,
        key: &[u8],
        fields: &[&str],
    ) -> Result<Option<Vec<Option<Vec<u8>>>>, Refusal> {
        let k = self.open(key)?;
        match k.kind() {
            Kind::Empty => Ok(None),
            Kind::Hash => k
                .hash_fields(fields)
                .map(Some)
                .ok_or_else(|| self.host_error("could not read a hash")),
            _ => Err(Refusal::WrongType),
        }
    }

    /// Check 6, one write, replicated as an effect and verified against its prediction.
    pub fn write(&self, op: &Op) -> Result<Reply, Refusal> {
        let args: Vec<&[u8]> = op.args.iter().map(Vec::as_slice).collect();
        let r: CallResult<'static> = self.ctx.call_ext(op.cmd, write_options(), args.as_slice());
        let reply = match r {
            Ok(reply) => own(&reply),
            Err(e) => {
                return Err(self.host_error(&format!(
                    "{} answered {}",
                    op.cmd,
                    printable(e.as_bytes())
                )))
            }
        };
        let ok = match (&op.expect, &reply) {
            (Expect::Int(want), Reply::Int(got)) => want == got,
            (Expect::AnyInt, Reply::Int(_)) => true,
            (Expect::Popped(id), Reply::Array(items)) => {
                matches!(items.first(), Some(Reply::Bulk(b)) if b == id)
            }
            _ => false,
        };
        if !ok {
            return Err(self.host_error(&format!(
                "{} answered {reply:?}, not {:?}",
                op.cmd, op.expect
            )));
        }
        Ok(reply)
    }

    /// Every planned write, in order.
    pub fn apply(&self, plan: &[Op]) -> Result<(), Refusal> {
        plan.iter().try_for_each(|op| self.write(op).map(|_| ()))
    }
}

/// The caller's ACL, checked on derived keys at first access (SPEC §5 check 4).
pub struct Fence {
    caller: Caller,
    verb: &'static str,
}

impl Fence {
    pub fn check(&self, key: &[u8], access: Access) -> Result<(), Refusal> {
        let perms = match access {
            Access::Read => valkey_module::raw::REDISMODULE_CMD_KEY_ACCESS,
            Access::Write => {
                valkey_module::raw::REDISMODULE_CMD_KEY_UPDATE
                    | valkey_module::raw::REDISMODULE_CMD_KEY_INSERT
                    | valkey_module::raw::REDISMODULE_CMD_KEY_DELETE
            }
        };
        if self.caller.allows(key, perms) {
            return Ok(());
        }
        let what = match access {
            Access::Read => "read",
            Access::Write => "write",
        };
        Err(Refusal::NoPerm(format!(
            "{} has no {what} permission on the derived key '{}'",
            self.verb,
            printable(key)
        )))
    }

    pub fn read(&self, key: &[u8]) -> Result<(), Refusal> {
        self.check(key, Access::Read)
    }

    pub fn write(&self, key: &[u8]) -> Result<(), Refusal> {
        self.check(key, Access::Write)
    }
}

/// Reply helpers.
pub fn bulk(b: &[u8]) -> ValkeyValue {
    ValkeyValue::StringBuffer(b.to_vec())
}

pub fn int(n: i64) -> ValkeyValue {
    ValkeyValue::Integer(n)
}

/// A refusal as the handler's error.
pub fn refuse(r: Refusal) -> ValkeyError {
    r.into()
}
