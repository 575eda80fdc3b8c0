//! Where the server calls in: a command ([`native!`], [`dispatch`]), a blocked client's wake
//! ([`waker!`], [`wake`]) and a keyspace event ([`listener!`], [`event`]), each run under
//! `catch_unwind` so no panic reaches the server; the running command's line (its argv, read
//! once), its clock and its replies.

use std::ffi::c_int;
use std::panic::{self, AssertUnwindSafe};
use std::ptr;

use valkey_module::{raw, Context, ValkeyError, ValkeyResult};

use super::blocking::ready_key;
use super::strings::{same, string_bytes, Str};

/// A verb's body: the full command line as bytes (name, numkeys, keys, argv).
pub type Handler = fn(&Context, &[&[u8]]) -> ValkeyResult;

/// The C entry point the server calls for one registered command.
pub type Callback =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// The C function the server calls for `$handler`, through the boundary `$boundary`
/// ([`dispatch`] or [`wake`]); each row needs its own (the C API passes no user data).
macro_rules! entry {
    ($boundary:ident, $handler:path) => {{
        #[allow(unsafe_code)]
        extern "C" fn entry(
            ctx: *mut valkey_module::raw::RedisModuleCtx,
            argv: *mut *mut valkey_module::raw::RedisModuleString,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            // SAFETY: the server calls a command, and a blocked command's reply callback, with
            // its `argc` live strings in `argv` (a reply callback's context names the ready key).
            unsafe { $crate::ffi::$boundary(ctx, argv, argc, $handler) }
        }
        entry as $crate::ffi::Callback
    }};
}
pub(crate) use entry;

/// Wraps a [`Handler`] into its own [`Callback`].
macro_rules! native {
    ($handler:path) => {
        $crate::ffi::entry!(dispatch, $handler)
    };
}
pub(crate) use native;

/// What a panic in a handler answers (no panic reaches the server).
const PANICKED: ValkeyError = ValkeyError::Str("EMQHOST trafikey caught a panic");

/// `body` on the command's context and its line read as byte slices (no copies, no retains),
/// under `catch_unwind`: `None` when it panicked. The line is the running command's while it
/// runs (`Names` reuses its strings).
///
/// # Safety
/// As [`dispatch`].
unsafe fn at_boundary<T>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    body: impl FnOnce(&Context, &[&[u8]]) -> T,
) -> (Context, Option<T>) {
    let context = Context::new(ctx);
    // the verbs' lines fit on the stack; a long batch (EXTENDS, a sweep) takes the heap
    let mut inline: [&[u8]; INLINE_ARGS] = [&[]; INLINE_ARGS];
    let mut heap = Vec::new();
    // SAFETY: as promised by the caller.
    let args = unsafe { arg_bytes(argv, argc, &mut inline, &mut heap) };
    let _line = CommandLine::set(argv, args);
    let out = panic::catch_unwind(AssertUnwindSafe(|| body(&context, args))).ok();
    (context, out)
}

/// The handler boundary: the handler run on the command line ([`at_boundary`]), its result
/// replied.
///
/// # Safety
/// `ctx` is the command's live context and `argv` holds `argc` live module strings (what the
/// server passes a command callback).
pub unsafe fn dispatch(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
) -> c_int {
    // SAFETY: as promised by the caller.
    let (context, result) = unsafe { at_boundary(ctx, argv, argc, handler) };
    context.reply(result.unwrap_or(Err(PANICKED))) as c_int
}

/// How many arguments a command line reads into a stack array.
const INLINE_ARGS: usize = 16;

/// What a blocked command's wake handler decided when a key it waits on was signalled ready.
pub enum Wake {
    /// Reply this and unblock the client.
    Reply(ValkeyResult),
    /// Reply nothing; the client stays blocked until the next signal or its timeout.
    Wait,
}

/// A blocking verb's wake body: the full command line as bytes, and the key signalled ready.
pub type WakeHandler = fn(&Context, &[&[u8]], &[u8]) -> Wake;

/// Wraps a [`WakeHandler`] into the reply callback `RM_BlockClientOnKeys` takes.
macro_rules! waker {
    ($handler:path) => {
        $crate::ffi::entry!(wake, $handler)
    };
}
pub(crate) use waker;

/// The boundary of a wake: as [`dispatch`], but `Wait` replies nothing and answers
/// `REDISMODULE_ERR`, which keeps the client blocked; a reply answers `REDISMODULE_OK`, which
/// unblocks it (the server then propagates what the wake wrote, as after a command).
///
/// # Safety
/// As [`dispatch`], from a reply callback of `RM_BlockClientOnKeys`.
pub unsafe fn wake(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: WakeHandler,
) -> c_int {
    // SAFETY: a reply callback's context, as promised by the caller.
    let ready = unsafe { ready_key(ctx) };
    // SAFETY: as promised by the caller.
    let (context, woke) =
        unsafe { at_boundary(ctx, argv, argc, |c, args| handler(c, args, ready)) };
    match woke.unwrap_or(Wake::Reply(Err(PANICKED))) {
        Wake::Wait => raw::REDISMODULE_ERR as c_int,
        Wake::Reply(result) => {
            context.reply(result);
            raw::REDISMODULE_OK as c_int
        }
    }
}

/// The running command's argv: the server's strings and their bytes (read once, at dispatch),
/// and which lengths they have (bit `len % 64`): a derived key, which no argument equals, is
/// not searched for among a batch's hundreds of arguments.
#[derive(Clone, Copy)]
pub(super) struct Line {
    argv: *mut *mut raw::RedisModuleString,
    args: *const &'static [u8],
    argc: usize,
    lengths: u64,
}

const NO_LINE: Line = Line {
    argv: ptr::null_mut(),
    args: ptr::null(),
    argc: 0,
    lengths: 0,
};

/// The bit of a string's length in [`Line::lengths`] (and in the held names' lengths).
pub(super) fn length_bit(len: usize) -> u64 {
    1 << (len % 64)
}

thread_local! {
    /// The running command's line, alive until its handler returns.
    static LINE: std::cell::Cell<Line> = const { std::cell::Cell::new(NO_LINE) };
}

/// The running command's line (none outside a handler).
pub(super) fn running_line() -> Line {
    LINE.with(std::cell::Cell::get)
}

/// Sets the running command's line for the handler's duration (the one before it restored on
/// drop: a command a script calls runs inside the script's own command).
struct CommandLine(Line);

impl CommandLine {
    fn set(argv: *mut *mut raw::RedisModuleString, args: &[&[u8]]) -> CommandLine {
        let line = Line {
            argv,
            args: args.as_ptr().cast::<&'static [u8]>(),
            argc: args.len(),
            lengths: args.iter().fold(0, |bits, a| bits | length_bit(a.len())),
        };
        CommandLine(LINE.with(|l| l.replace(line)))
    }
}

impl Drop for CommandLine {
    fn drop(&mut self) {
        LINE.with(|l| l.set(self.0));
    }
}

/// The argument of the command `line` equal to `bytes`, and its index, borrowed: a view, valid
/// until the handler returns (what keeps a string longer — a key handle, a replicated argv, a
/// blocked client's keys — takes its own reference). Searched from `from` on, then from the
/// start: a batch asks for its arguments in order (the one after the last found is next).
pub(super) fn argument(line: Line, bytes: &[u8], from: usize) -> Option<(usize, Str)> {
    if line.argv.is_null() || line.args.is_null() || line.lengths & length_bit(bytes.len()) == 0 {
        return None;
    }
    // SAFETY: the dispatcher's `argc` byte slices of the server's `argc` live strings, both
    // alive while the handler runs (LINE is restored when it returns).
    let args = unsafe { std::slice::from_raw_parts(line.args, line.argc) };
    let from = from.min(args.len());
    let i = (from..args.len())
        .chain(0..from)
        .find(|&i| same(args[i], bytes))?;
    let found = Str {
        // SAFETY: as above; `i` < argc.
        ptr: unsafe { *line.argv.add(i) },
        ctx: ptr::null_mut(),
        data: args[i].as_ptr(),
        len: args[i].len(),
        counted: false,
    };
    Some((i, found))
}

/// The command line as byte slices borrowing the server's strings: in `inline` when they
/// fit, else in `heap`.
///
/// # Safety
/// `argv` holds `argc` live module strings that outlive the slices.
unsafe fn arg_bytes<'a, 'b>(
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    inline: &'b mut [&'a [u8]; INLINE_ARGS],
    heap: &'b mut Vec<&'a [u8]>,
) -> &'b [&'a [u8]] {
    let count = if argv.is_null() {
        0
    } else {
        usize::try_from(argc).unwrap_or(0)
    };
    // SAFETY: the server passes `argc` valid strings in `argv`, alive for the call.
    let arg = |i: usize| unsafe { string_bytes(*argv.add(i)) };
    if count <= INLINE_ARGS {
        for (i, slot) in inline.iter_mut().enumerate().take(count) {
            *slot = arg(i);
        }
        &inline[..count]
    } else {
        heap.extend((0..count).map(arg));
        heap
    }
}

/// A keyspace-event handler: the key the event names, as bytes.
pub type EventHandler = fn(&Context, &[u8]);

/// Wraps an [`EventHandler`] into a keyspace-event callback.
macro_rules! listener {
    ($handler:path) => {{
        #[allow(unsafe_code)]
        unsafe extern "C" fn entry(
            ctx: *mut valkey_module::raw::RedisModuleCtx,
            _type: std::ffi::c_int,
            _event: *const std::ffi::c_char,
            key: *mut valkey_module::raw::RedisModuleString,
        ) -> std::ffi::c_int {
            // SAFETY: the server passes a live context and a live key string, alive for the
            // call.
            unsafe { $crate::ffi::event(ctx, key, $handler) }
        }
        Some(entry as unsafe extern "C" fn(_, _, _, _) -> _)
    }};
}
pub(crate) use listener;

/// The boundary of a keyspace-event callback: no panic reaches the server.
///
/// # Safety
/// As the server calls a notification callback: `key` a live string.
pub unsafe fn event(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    handler: EventHandler,
) -> c_int {
    if key.is_null() {
        return raw::REDISMODULE_OK as c_int;
    }
    let context = Context::new(ctx);
    // SAFETY: as promised by the caller.
    let key = unsafe { string_bytes(key) };
    let _ = panic::catch_unwind(AssertUnwindSafe(|| handler(&context, key)));
    raw::REDISMODULE_OK as c_int
}

/// Reply the start of an array of `len` elements, each replied next (`RM_ReplyWithArray`).
pub fn reply_array(ctx: &Context, len: usize) {
    raw::reply_with_array(ctx.ctx, len as std::ffi::c_long);
}

/// Reply a string the module holds (`RM_ReplyWithString`: no copy made first).
pub fn reply_str(ctx: &Context, s: &Str) {
    raw::reply_with_string(ctx.ctx, s.ptr);
}

pub fn reply_null(ctx: &Context) {
    raw::reply_with_null(ctx.ctx);
}

pub fn reply_int(ctx: &Context, n: i64) {
    raw::reply_with_long_long(ctx.ctx, n);
}

/// Reply an error (its code the text's first word) as one element of an array (COMPLETES' refused
/// pair); a refusal of the whole command is the handler's `Err` instead.
pub fn reply_error(ctx: &Context, text: &str) {
    let _ = ctx.reply_error_string(text);
}

/// The server's millisecond clock, `server.ustime / 1000`: the value TIME reports, frozen for
/// the command. Falls back to `Milliseconds` on a server without `CachedMicroseconds`.
pub fn now_ms() -> Option<i64> {
    if let Some(cached) = api!(RedisModule_CachedMicroseconds) {
        // SAFETY: takes no arguments; reads the command's cached clock.
        return Some(unsafe { cached() } / 1000);
    }
    // SAFETY: takes no arguments.
    api!(RedisModule_Milliseconds).map(|ms| unsafe { ms() })
}

#[cfg(test)]
mod tests {
    use super::length_bit;

    #[test]
    fn lengths_share_a_bit_only_sixty_four_apart() {
        assert_ne!(length_bit(16), length_bit(32));
        assert_eq!(length_bit(16), length_bit(80));
    }
}
