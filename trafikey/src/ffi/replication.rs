//! What a command sends beyond its key writes: each write's effect to replicas and the AOF
//! (`RM_Replicate`, inside the command's MULTI/EXEC), and a message to a shard channel's
//! subscribers (`RM_PublishMessageShard`, which nothing replicates); and a write no key handle
//! makes (HSETEX), run through the command path with the strings its effect then replicates.

use std::ffi::c_int;
use std::ptr;

use valkey_module::{raw, Context};

use super::strings::Str;

/// How many arguments of an effect `replicate` hands over from the stack (a CLAIMS run of
/// 100 leases is one ZADD of 201).
const ARGV_ON_STACK: usize = 256;

/// Replicate one effect: `cmd` with `args`, to replicas and the AOF, inside the command's
/// MULTI/EXEC (`RM_Replicate`). False when the server refuses it. Up to 12 arguments go as
/// one `s` format each, so the server sizes its argv once (format `v` makes it grow it); a
/// longer effect (a batch, merged: `Host::replicate`) goes as one `v` vector.
pub fn replicate(ctx: &Context, cmd: &std::ffi::CStr, args: &[Str]) -> bool {
    let Some(rep) = (api!(RedisModule_Replicate)) else {
        return false;
    };
    let (c, name) = (ctx.ctx, cmd.as_ptr());
    // `RM_Replicate` with the format `$fmt` (one `s` per argument) and the arguments `$i…`
    macro_rules! each {
        ($fmt:literal; $($i:literal)*) => {
            rep(c, name, $fmt.as_ptr(), $(args[$i].ptr),*)
        };
    }
    // SAFETY: a live command context; each `s` takes one live RedisModuleString, `v` takes
    // (RedisModuleString **, size_t); the server takes its own references to what it keeps,
    // ours are released by the caller.
    let status = unsafe {
        match args.len() {
            1 => each!(c"s"; 0),
            2 => each!(c"ss"; 0 1),
            3 => each!(c"sss"; 0 1 2),
            4 => each!(c"ssss"; 0 1 2 3),
            5 => each!(c"sssss"; 0 1 2 3 4),
            6 => each!(c"ssssss"; 0 1 2 3 4 5),
            7 => each!(c"sssssss"; 0 1 2 3 4 5 6),
            8 => each!(c"ssssssss"; 0 1 2 3 4 5 6 7),
            9 => each!(c"sssssssss"; 0 1 2 3 4 5 6 7 8),
            10 => each!(c"ssssssssss"; 0 1 2 3 4 5 6 7 8 9),
            11 => each!(c"sssssssssss"; 0 1 2 3 4 5 6 7 8 9 10),
            12 => each!(c"ssssssssssss"; 0 1 2 3 4 5 6 7 8 9 10 11),
            // a merged effect (a batch's pops or leases): its pointers on the stack when
            // they fit, else in a vector
            n if n <= ARGV_ON_STACK => {
                let mut argv = [ptr::null_mut(); ARGV_ON_STACK];
                for (slot, s) in argv.iter_mut().zip(args) {
                    *slot = s.ptr;
                }
                rep(c, name, c"v".as_ptr(), argv.as_mut_ptr(), n)
            }
            _ => {
                let mut argv: Vec<*mut raw::RedisModuleString> =
                    args.iter().map(|s| s.ptr).collect();
                rep(c, name, c"v".as_ptr(), argv.as_mut_ptr(), argv.len())
            }
        }
    };
    status == raw::REDISMODULE_OK as c_int
}

/// SPUBLISH `message` on `channel` (sharded: the channel's slot is its hashtag's): delivered
/// to the subscribers; nothing is written or replicated. False when the host has no such call
/// (the server answers how many received it, which may be none).
pub fn publish_shard(ctx: &Context, channel: &Str, message: &Str) -> bool {
    let Some(publish) = (api!(RedisModule_PublishMessageShard)) else {
        return false;
    };
    // SAFETY: a live command context and live strings (the server copies the message).
    unsafe { publish(ctx.ctx, channel.ptr, message.ptr) };
    true
}

/// What a command run through the command path answered (`call_int`).
#[derive(Debug)]
pub enum Called {
    Int(i64),
    /// Its error reply.
    Refused(String),
    /// Another reply, or no reply (the host refused the call).
    Other,
}

/// Run `cmd` with `args` through the command path (`RM_Call`, errors as replies), for a write
/// no key handle makes, and replicate it as the server propagates the command it ran (`!`:
/// its own argv, inside the command's MULTI/EXEC, where the call falls among the effects; no
/// `RM_Replicate`, which looks the command up by name again and builds a second argv). The
/// arguments go as the strings the caller holds (format `v`): none is copied.
pub fn call_int(ctx: &Context, cmd: &std::ffi::CStr, args: &[Str]) -> Called {
    let (Some(call), Some(kind), Some(int), Some(text), Some(free)) = (
        api!(RedisModule_Call),
        api!(RedisModule_CallReplyType),
        api!(RedisModule_CallReplyInteger),
        api!(RedisModule_CallReplyStringPtr),
        api!(RedisModule_FreeCallReply),
    ) else {
        return Called::Other;
    };
    let mut argv: Vec<*mut raw::RedisModuleString> = args.iter().map(|s| s.ptr).collect();
    // SAFETY: a live command context; `v` takes (RedisModuleString **, size_t) of live strings,
    // which the server only reads (it takes its own references to what it keeps); the reply is
    // read, then freed once, before the function returns.
    unsafe {
        let reply = call(
            ctx.ctx,
            cmd.as_ptr(),
            c"!vE".as_ptr(),
            argv.as_mut_ptr(),
            argv.len(),
        );
        if reply.is_null() {
            return Called::Other;
        }
        let answer = match kind(reply) as isize {
            raw::REDISMODULE_REPLY_INTEGER => Called::Int(int(reply)),
            raw::REDISMODULE_REPLY_ERROR => {
                let mut len = 0usize;
                let p = text(reply, &mut len);
                let bytes = match p.is_null() {
                    true => &[][..],
                    false => std::slice::from_raw_parts(p.cast::<u8>(), len),
                };
                Called::Refused(String::from_utf8_lossy(bytes).into_owned())
            }
            _ => Called::Other,
        };
        free(reply);
        answer
    }
}
