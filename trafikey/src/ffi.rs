//! Every `unsafe` block of the crate: the raw module API calls the safe wrappers of
//! `valkey-module` 0.1.14 do not cover (command info with key-specs, the cached clock, ACL
//! checks on a held user, read-only key handles), and the handler boundary.

use std::ffi::{c_char, c_int, CString};
use std::panic::{self, AssertUnwindSafe};
use std::ptr;

use valkey_module::commands::{get_redis_key_spec, BeginSearch, FindKeys, KeySpec, KeySpecFlags};
use valkey_module::{raw, Context, ValkeyError, ValkeyResult};

/// A verb's body: the full command line as bytes (name, numkeys, keys, argv).
pub type Handler = fn(&Context, &[&[u8]]) -> ValkeyResult;

/// The C entry point the server calls for one registered command.
pub type Callback =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// Wraps a [`Handler`] into its own [`Callback`] (the C API passes no user data, so every
/// row needs its own function).
macro_rules! native {
    ($handler:path) => {{
        extern "C" fn entry(
            ctx: *mut valkey_module::raw::RedisModuleCtx,
            argv: *mut *mut valkey_module::raw::RedisModuleString,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            // SAFETY: the server calls a command with `argc` live strings in `argv`.
            unsafe { $crate::ffi::dispatch(ctx, argv, argc, $handler) }
        }
        entry as $crate::ffi::Callback
    }};
}
pub(crate) use native;

/// The handler boundary: argv read as byte slices (no copies, no retains), the handler run
/// under `catch_unwind` so no panic reaches the server, the result replied.
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
    let context = Context::new(ctx);
    // the verbs' lines fit on the stack; a long batch (EXTENDS, a sweep) takes the heap
    let mut inline: [&[u8]; INLINE_ARGS] = [&[]; INLINE_ARGS];
    let mut heap = Vec::new();
    let args = unsafe { arg_bytes(argv, argc, &mut inline, &mut heap) };
    let _line = CommandLine::set(argv, args);
    let result = panic::catch_unwind(AssertUnwindSafe(|| handler(&context, args)))
        .unwrap_or_else(|_| Err(ValkeyError::Str("EMQHOST trafikey caught a panic")));
    context.reply(result) as c_int
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

/// Wraps a [`WakeHandler`] into the reply callback `RM_BlockClientOnKeys` takes (as
/// [`native!`] does for a command).
macro_rules! waker {
    ($handler:path) => {{
        extern "C" fn entry(
            ctx: *mut valkey_module::raw::RedisModuleCtx,
            argv: *mut *mut valkey_module::raw::RedisModuleString,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            // SAFETY: the server calls a reply callback with the blocked command's `argc` live
            // strings in `argv`, in a context that names the ready key.
            unsafe { $crate::ffi::wake(ctx, argv, argc, $handler) }
        }
        entry as $crate::ffi::Callback
    }};
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
    let context = Context::new(ctx);
    let mut inline: [&[u8]; INLINE_ARGS] = [&[]; INLINE_ARGS];
    let mut heap = Vec::new();
    let args = unsafe { arg_bytes(argv, argc, &mut inline, &mut heap) };
    // SAFETY: a reply callback's context holds the ready key, alive for the callback.
    let ready = unsafe {
        match raw::RedisModule_GetBlockedClientReadyKey {
            Some(get) => {
                let key = get(ctx);
                if key.is_null() {
                    &[][..]
                } else {
                    string_bytes(key)
                }
            }
            None => &[][..],
        }
    };
    let _line = CommandLine::set(argv, args);
    let woke = panic::catch_unwind(AssertUnwindSafe(|| handler(&context, args, ready)))
        .unwrap_or_else(|_| Wake::Reply(Err(ValkeyError::Str("EMQHOST trafikey caught a panic"))));
    match woke {
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
struct Line {
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

/// The bit of a string's length in [`Line::lengths`].
fn length_bit(len: usize) -> u64 {
    1 << (len % 64)
}

thread_local! {
    /// The running command's line, alive until its handler returns.
    static LINE: std::cell::Cell<Line> = const { std::cell::Cell::new(NO_LINE) };
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
fn argument(line: Line, bytes: &[u8], from: usize) -> Option<(usize, Str)> {
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

/// May this command block its client? Not inside MULTI/EXEC or a script, nor where the
/// server denies blocking (the server would answer an error instead of blocking).
pub fn may_block(ctx: &Context) -> bool {
    use valkey_module::ContextFlags as F;
    !ctx.get_flags()
        .intersects(F::MULTI | F::LUA | F::DENY_BLOCKING | F::REPLICATED | F::LOADING)
}

/// Block the calling client on `keys` (`RM_BlockClientOnKeys`): `on_wake` runs each time one
/// of them is signalled ready (core writes that create a zset signal it, and so does
/// [`signal_ready`]), `on_timeout` after `timeout_ms` (0: never). No private data is held,
/// so a disconnect leaves nothing to free. False when the server lacks the call.
pub fn block_on_keys(
    ctx: &Context,
    keys: &[Str],
    timeout_ms: i64,
    on_wake: Callback,
    on_timeout: Callback,
) -> bool {
    let Some(block) = (unsafe { raw::RedisModule_BlockClientOnKeys }) else {
        return false;
    };
    let mut argv: Vec<*mut raw::RedisModuleString> = keys.iter().map(|k| k.ptr).collect();
    let Ok(numkeys) = c_int::try_from(argv.len()) else {
        return false;
    };
    // SAFETY: a live command context (not a reply callback: the caller checked
    // `may_block`); the server takes its own reference to every key it keeps.
    let blocked = unsafe {
        block(
            ctx.ctx,
            Some(on_wake),
            Some(on_timeout),
            None,
            timeout_ms,
            argv.as_mut_ptr(),
            numkeys,
            ptr::null_mut(),
        )
    };
    !blocked.is_null()
}

/// Signal `key` ready (`RM_SignalKeyAsReady`): every client blocked on it gets its wake
/// callback after this command (a quick return when no module client is blocked).
pub fn signal_ready(ctx: &Context, key: &Str) {
    if let Some(signal) = unsafe { raw::RedisModule_SignalKeyAsReady } {
        // SAFETY: a live context with a selected database, and a live key string.
        unsafe { signal(ctx.ctx, key.ptr) };
    }
}

/// Signal a key written through a key handle as modified (`RM_SignalModifiedKey`): WATCH and
/// client tracking see the change. The module turns the server's implicit signal at a write
/// handle's close off ([`set_options`]), so a handle opened for a write the checks then refuse
/// touches no WATCHed key.
pub fn signal_modified(ctx: &Context, key: &Str) {
    if let Some(signal) = unsafe { raw::RedisModule_SignalModifiedKey } {
        // SAFETY: a live context with a selected database, and a live key string.
        unsafe { signal(ctx.ctx, key.ptr) };
    }
}

/// Valkey 9's `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (valkeymodule.h; the crate's
/// bundled headers predate it).
const HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

/// At load, the module's options, in one call (`RM_SetModuleOptions` replaces them all): the
/// module signals modified keys itself ([`signal_modified`]); and it handles atomic slot
/// migration (`CLUSTER MIGRATESLOTS`) when the server knows that option
/// (`RM_GetModuleOptionsAll`: Valkey 9 and later; without it Valkey refuses every atomic
/// migration on a node that loaded the module). True when the migration option was declared.
pub fn set_options(ctx: &Context) -> bool {
    // SAFETY: the API table entries `RedisModule_Init` filled at load; both are called from
    // OnLoad with its live context.
    unsafe {
        let Some(set) = raw::RedisModule_SetModuleOptions else {
            return false;
        };
        let migration = raw::RedisModule_GetModuleOptionsAll
            .is_some_and(|all| all() & HANDLE_ATOMIC_SLOT_MIGRATION != 0);
        let mut options = raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int;
        if migration {
            options |= HANDLE_ATOMIC_SLOT_MIGRATION;
        }
        set(ctx.ctx, options);
        migration
    }
}

/// A keyspace-event handler: the key the event names, as bytes.
pub type EventHandler = fn(&Context, &[u8]);

/// Subscribe `handler` to the keyspace events of the `types` classes
/// (`RM_SubscribeToKeyspaceEvents`, which sees every event whatever
/// `notify-keyspace-events` says). The callback is generated by [`listener!`].
pub fn subscribe(ctx: &Context, types: c_int, callback: raw::RedisModuleNotificationFunc) -> bool {
    let Some(sub) = (unsafe { raw::RedisModule_SubscribeToKeyspaceEvents }) else {
        return false;
    };
    // SAFETY: called from OnLoad with its context.
    unsafe { sub(ctx.ctx, types, callback) == raw::REDISMODULE_OK as c_int }
}

/// Wraps an [`EventHandler`] into a keyspace-event callback.
macro_rules! listener {
    ($handler:path) => {{
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

/// # Safety
/// `s` must be a live module string; the slice borrows it and must not outlive it.
unsafe fn string_bytes<'a>(s: *const raw::RedisModuleString) -> &'a [u8] {
    let Some(ptr_len) = raw::RedisModule_StringPtrLen else {
        return &[];
    };
    let mut len: usize = 0;
    let p = ptr_len(s, &mut len);
    if p.is_null() {
        return &[];
    }
    std::slice::from_raw_parts(p.cast::<u8>(), len)
}

/// A module string we hold one reference to (created by us, retained, or handed to us by
/// the server), released on drop; or a view of a shared field name, which lives as long as
/// the module and is never released. Borrowed as bytes; never written.
pub struct Str {
    ptr: *mut raw::RedisModuleString,
    ctx: *mut raw::RedisModuleCtx,
    /// Its bytes, read once (a string we hold is never changed).
    data: *const u8,
    len: usize,
    /// Does this value hold a reference (released on drop)? False for a view of a shared name
    /// or of the running command's argument.
    counted: bool,
}

impl Str {
    /// Take over one reference to a live string (`ctx` = the context it was handed with).
    ///
    /// # Safety
    /// `ptr` is a live, non-NULL module string whose reference we now own.
    unsafe fn own(ptr: *mut raw::RedisModuleString, ctx: *mut raw::RedisModuleCtx) -> Str {
        let bytes = string_bytes(ptr);
        Str {
            ptr,
            ctx,
            data: bytes.as_ptr(),
            len: bytes.len(),
            counted: true,
        }
    }

    /// A new string holding a copy of `bytes` (created with a NULL context).
    pub fn new(bytes: &[u8]) -> Option<Str> {
        // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
        let create = unsafe { raw::RedisModule_CreateString }?;
        // SAFETY: a NULL context is allowed; the buffer is copied.
        let s = unsafe {
            create(
                ptr::null_mut(),
                bytes.as_ptr().cast::<c_char>(),
                bytes.len(),
            )
        };
        // SAFETY: a new string, ours.
        (!s.is_null()).then(|| unsafe { Str::own(s, ptr::null_mut()) })
    }

    /// One more reference to the same string (a refcount, no copy; a shared name's view
    /// needs none).
    pub fn retain(&self) -> Option<Str> {
        if self.counted {
            // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
            let retain = unsafe { raw::RedisModule_RetainString }?;
            // SAFETY: a live string we hold; a NULL context takes a plain reference.
            unsafe { retain(ptr::null_mut(), self.ptr) };
        }
        Some(Str {
            ptr: self.ptr,
            ctx: ptr::null_mut(),
            data: self.data,
            len: self.len,
            counted: self.counted,
        })
    }

    /// A view that holds no reference: only for strings that are never released.
    fn view(&self) -> Str {
        Str {
            ptr: self.ptr,
            ctx: ptr::null_mut(),
            data: self.data,
            len: self.len,
            counted: false,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        if self.data.is_null() {
            return &[];
        }
        // SAFETY: the bytes of a live string we hold a reference to (read at `own`); the
        // slice borrows `self`.
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

impl std::ops::Deref for Str {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}

impl std::fmt::Debug for Str {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.bytes()))
    }
}

impl Drop for Str {
    fn drop(&mut self) {
        if self.ptr.is_null() || !self.counted {
            return;
        }
        // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
        if let Some(free) = unsafe { raw::RedisModule_FreeString } {
            // SAFETY: we hold one reference, released once, with the context it came with.
            unsafe { free(self.ctx, self.ptr) };
        }
    }
}

/// Declares the strings every command may use (field names, states, the small numbers and
/// words of the effects), made once, and `shared_index`, which finds one by its bytes with
/// comparisons the compiler unrolls.
macro_rules! shared_names {
    ($($name:literal),* $(,)?) => {
        const SHARED_NAMES: &[&str] = &[$($name),*];

        fn shared_index(bytes: &[u8]) -> Option<usize> {
            // keys, ids and payloads are longer than every shared name: one comparison
            if bytes.len() > SHARED_LONGEST {
                return None;
            }
            let mut i = 0;
            $(
                if bytes == $name.as_bytes() {
                    return Some(i);
                }
                i += 1;
            )*
            let _ = i;
            None
        }
    };
}

/// The length of the longest shared name.
const SHARED_LONGEST: usize = {
    let (mut i, mut longest) = (0, 0);
    while i < SHARED_NAMES.len() {
        if SHARED_NAMES[i].len() > longest {
            longest = SHARED_NAMES[i].len();
        }
        i += 1;
    }
    longest
};

// the fields and words of the lifecycle's writes first (the lookup tries them in order)
shared_names!(
    "state",
    "attempts",
    "payload",
    "created",
    "pending",
    "active",
    "lease_epoch",
    "started",
    "count",
    "0",
    "1",
    "group",
    "parent",
    "unique",
    "events",
    "waiters",
    "paused",
    "rate_limit",
    "rate_window",
    "priority",
    "failures",
    "last_error",
    "stalled",
    "MAXLEN",
    "type",
    "id",
    "attempt",
    "finished",
    "progress",
    "schedule",
    "dead",
    "completed",
    "failed",
);

struct Shared(Vec<Str>);
// SAFETY: module strings are only touched from the server's main thread (command handlers);
// these are created once and never freed (so views of them need no reference), and are
// only read or refcounted there.
unsafe impl Sync for Shared {}
// SAFETY: as for Sync above: only the main thread touches them, and they are never freed.
unsafe impl Send for Shared {}

static SHARED: std::sync::OnceLock<Option<Shared>> = std::sync::OnceLock::new();

/// The shared strings: `SHARED_NAMES`, then the epoch (`run_id`), which every lease stamps.
fn shared_all() -> Option<&'static [Str]> {
    let all = SHARED.get_or_init(|| {
        SHARED_NAMES
            .iter()
            .map(|n| n.as_bytes())
            .chain(crate::epoch::current())
            .map(Str::new)
            .collect::<Option<Vec<_>>>()
            .map(Shared)
    });
    all.as_ref().map(|s| s.0.as_slice())
}

fn shared(bytes: &[u8]) -> Option<Str> {
    let all = shared_all()?;
    let at = match shared_index(bytes) {
        Some(at) => at,
        // the epoch, compared only when the length matches
        None => {
            let epoch = all.get(SHARED_NAMES.len())?;
            if epoch.bytes() != bytes {
                return None;
            }
            SHARED_NAMES.len()
        }
    };
    all.get(at).map(Str::view)
}

/// `a == b`, the last bytes compared first: the strings searched for a name are mostly keys of
/// one queue, ids and times, which share their length and their start and differ at the end
/// (a byte compared inline, not a `memcmp` call for each).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.last() == b.last() && a == b
}

/// How many recently used strings are kept for reuse, from one command to the next (a key
/// name is checked, opened and replicated several times; a member is read, then written; a
/// queue's meta and counter keys are asked for by every command). A string found is swapped
/// to the end, a new one pushed there, and the first goes: nearly the least recently used,
/// with no shifting of the others on a hit.
const RECENT: usize = 8;

/// One command's module strings: the shared names, the last few made (reused), the command's
/// own arguments (borrowed); else a new one.
pub struct Names {
    /// The running command's line, read once.
    line: Line,
    /// Where the next argument is looked for first: after the last one found.
    next_argument: std::cell::Cell<usize>,
    recent: std::cell::RefCell<Vec<Str>>,
}

impl Names {
    /// The running command's names, kept in `recent` (an empty vector).
    pub fn new(recent: Vec<Str>) -> Names {
        Names {
            line: LINE.with(std::cell::Cell::get),
            next_argument: std::cell::Cell::new(0),
            recent: std::cell::RefCell::new(recent),
        }
    }

    /// The recent strings, handed back to be kept for the next command (strings made with
    /// no context: they outlive the command).
    pub fn take_recent(&self) -> Vec<Str> {
        self.recent.take()
    }

    /// The string for `bytes`, one more reference to it.
    pub fn get(&self, bytes: &[u8]) -> Option<Str> {
        self.with(bytes, Str::retain).flatten()
    }

    /// `f` on the string for `bytes`, borrowed for the call (no reference of its own: for a
    /// string used and let go, such as a key whose ACL is checked). `f` must not ask for names.
    pub fn with<T>(&self, bytes: &[u8], f: impl FnOnce(&Str) -> T) -> Option<T> {
        // a key, an id or a time is longer than every shared name and is not the epoch
        let short = bytes.len() <= SHARED_LONGEST
            || crate::epoch::current().is_some_and(|e| e.len() == bytes.len());
        if let Some(s) = short.then(|| shared(bytes)).flatten() {
            return Some(f(&s));
        }
        let mut recent = self.recent.borrow_mut();
        if let Some(at) = recent.iter().rposition(|s| same(s.bytes(), bytes)) {
            let last = recent.len() - 1;
            recent.swap(at, last);
            return recent.last().map(f);
        }
        if let Some((at, s)) = argument(self.line, bytes, self.next_argument.get()) {
            self.next_argument.set(at + 1);
            return Some(f(&s));
        }
        keep(&mut recent, Str::new(bytes)?);
        recent.last().map(f)
    }

    /// Keep a string the server handed over (a popped member) among the recent ones: the
    /// command writes it again (CLAIMS adds the member it popped to active).
    pub fn remember(&self, s: &Str) {
        if let Some(s) = s.retain() {
            keep(&mut self.recent.borrow_mut(), s);
        }
    }
}

/// Push `s` last among the recent strings, the first going when they are full.
fn keep(recent: &mut Vec<Str>, s: Str) {
    if recent.len() == RECENT {
        recent.remove(0);
    }
    if recent.capacity() == 0 {
        recent.reserve_exact(RECENT);
    }
    recent.push(s);
}

/// How many arguments of an effect `replicate` hands over from the stack (a CLAIMS run of
/// 100 leases is one ZADD of 201).
const ARGV_ON_STACK: usize = 256;

/// Replicate one effect: `cmd` with `args`, to replicas and the AOF, inside the command's
/// MULTI/EXEC (`RM_Replicate`). False when the server refuses it. Up to 12 arguments go as
/// one `s` format each, so the server sizes its argv once (format `v` makes it grow it); a
/// longer effect (a batch, merged: `Host::replicate`) goes as one `v` vector.
pub fn replicate(ctx: &Context, cmd: &std::ffi::CStr, args: &[Str]) -> bool {
    // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
    let Some(rep) = (unsafe { raw::RedisModule_Replicate }) else {
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
    // SAFETY: the function pointers are filled at module init; both take no arguments.
    unsafe {
        if let Some(cached) = raw::RedisModule_CachedMicroseconds {
            return Some(cached() / 1000);
        }
        raw::RedisModule_Milliseconds.map(|ms| ms())
    }
}

/// Context flags say the command came over the replication link (no user to check).
pub fn replicated(ctx: &Context) -> bool {
    ctx.get_flags()
        .intersects(valkey_module::ContextFlags::REPLICATED | valkey_module::ContextFlags::LOADING)
}

/// The calling user, held for the command's ACL checks on derived keys.
pub enum Caller {
    /// No client user (replication link, loading): the primary already checked.
    Trusted,
    /// The user, or NULL when the name resolved to no user (every check then fails).
    User(*mut raw::RedisModuleUser),
}

impl Caller {
    pub fn of(ctx: &Context) -> Caller {
        if replicated(ctx) {
            return Caller::Trusted;
        }
        // SAFETY: called from a command handler with its live context; the name string is
        // freed after the lookup; the user is freed in Drop.
        unsafe {
            let (Some(name_of), Some(lookup), Some(free)) = (
                raw::RedisModule_GetCurrentUserName,
                raw::RedisModule_GetModuleUserFromUserName,
                raw::RedisModule_FreeString,
            ) else {
                return Caller::User(ptr::null_mut());
            };
            let name = name_of(ctx.ctx);
            if name.is_null() {
                return Caller::Trusted;
            }
            let user = lookup(name);
            free(ctx.ctx, name);
            Caller::User(user)
        }
    }

    /// Does the user hold `perms` (REDISMODULE_CMD_KEY_* bits) on `key`?
    pub fn allows(&self, key: &Str, perms: u32) -> bool {
        let user = match self {
            Caller::Trusted => return true,
            Caller::User(u) if u.is_null() => return false,
            Caller::User(u) => *u,
        };
        // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
        let Some(check) = (unsafe { raw::RedisModule_ACLCheckKeyPermissions }) else {
            return false;
        };
        // SAFETY: `user` is a live module user held by us; `key` is a live string.
        unsafe { check(user, key.ptr, perms as c_int) == raw::REDISMODULE_OK as c_int }
    }
}

impl Caller {
    /// May the user publish on `channel` (a literal channel name)?
    pub fn allows_channel(&self, channel: &Str) -> bool {
        let user = match self {
            Caller::Trusted => return true,
            Caller::User(u) if u.is_null() => return false,
            Caller::User(u) => *u,
        };
        let Some(check) = (unsafe { raw::RedisModule_ACLCheckChannelPermissions }) else {
            return false;
        };
        let publish = raw::REDISMODULE_CMD_CHANNEL_PUBLISH as c_int;
        // SAFETY: `user` is a live module user held by us; `channel` is a live string.
        unsafe { check(user, channel.ptr, publish) == raw::REDISMODULE_OK as c_int }
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        if let Caller::User(u) = self {
            if !u.is_null() {
                // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
                if let Some(free) = unsafe { raw::RedisModule_FreeModuleUser } {
                    // SAFETY: obtained from GetModuleUserFromUserName, freed once.
                    unsafe { free(*u) };
                }
            }
        }
    }
}

/// SPUBLISH `message` on `channel` (sharded: the channel's slot is its hashtag's): delivered
/// to the subscribers; nothing is written or replicated. False when the host has no such call
/// (the server answers how many received it, which may be none).
pub fn publish_shard(ctx: &Context, channel: &Str, message: &Str) -> bool {
    let Some(publish) = (unsafe { raw::RedisModule_PublishMessageShard }) else {
        return false;
    };
    // SAFETY: a live command context and live strings (the server copies the message).
    unsafe { publish(ctx.ctx, channel.ptr, message.ptr) };
    true
}

/// What a key holds, as far as the verbs care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Empty,
    Hash,
    Zset,
    Stream,
    Other,
}

/// A key handle (read, or read and write): types, zset and hash reads and writes without the
/// command path. Writes through it are not propagated by the server: the host replicates
/// each write's effect itself.
pub struct Key {
    ctx: *mut raw::RedisModuleCtx,
    name: Str,
    /// The name's [`key_tag`].
    tag: u64,
    key: *mut raw::RedisModuleKey,
}

/// A key name's tag: its length and its last eight bytes, where the keys of one queue differ
/// (ids, times). A batch holds a hundred handles of keys of one length and one start: a
/// search compares their tags, and the bytes only where a tag matches.
pub fn key_tag(name: &[u8]) -> u64 {
    let tail = &name[name.len().saturating_sub(8)..];
    let mut last = [0u8; 8];
    last[..tail.len()].copy_from_slice(tail);
    u64::from_le_bytes(last) ^ (name.len() as u64).rotate_right(16)
}

impl Key {
    fn open_mode(ctx: &Context, name: Str, mode: u32) -> Option<Key> {
        // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
        let open = unsafe { raw::RedisModule_OpenKey }?;
        // SAFETY: live context and key name; READ mode returns NULL for a missing key.
        let key = unsafe { open(ctx.ctx, name.ptr, mode as c_int) };
        Some(Key {
            ctx: ctx.ctx,
            tag: key_tag(name.bytes()),
            name,
            key: key.cast(),
        })
    }

    /// The key's name.
    pub fn name(&self) -> &[u8] {
        self.name.bytes()
    }

    /// Is this the handle of `name`, whose [`key_tag`] is `tag`?
    pub fn is(&self, name: &[u8], tag: u64) -> bool {
        self.tag == tag && same(self.name(), name)
    }

    /// The key's name, as the server string the handle was opened with.
    pub fn name_str(&self) -> &Str {
        &self.name
    }

    pub fn read(ctx: &Context, name: Str) -> Option<Key> {
        Key::open_mode(ctx, name, raw::REDISMODULE_READ)
    }

    pub fn write(ctx: &Context, name: Str) -> Option<Key> {
        let key = Key::open_mode(ctx, name, raw::REDISMODULE_READ | raw::REDISMODULE_WRITE)?;
        (!key.key.is_null()).then_some(key)
    }

    pub fn kind(&self) -> Kind {
        if self.key.is_null() {
            return Kind::Empty;
        }
        // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
        let Some(key_type) = (unsafe { raw::RedisModule_KeyType }) else {
            return Kind::Other;
        };
        // SAFETY: a live, non-NULL key handle.
        match unsafe { key_type(self.key) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => Kind::Empty,
            raw::REDISMODULE_KEYTYPE_HASH => Kind::Hash,
            raw::REDISMODULE_KEYTYPE_ZSET => Kind::Zset,
            raw::REDISMODULE_KEYTYPE_STREAM => Kind::Stream,
            _ => Kind::Other,
        }
    }

    /// The member's score; `None` when the key is not a zset or the member is absent.
    pub fn zscore(&self, member: &Str) -> Option<f64> {
        if self.kind() != Kind::Zset {
            return None;
        }
        // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
        let zscore = unsafe { raw::RedisModule_ZsetScore }?;
        let mut score = 0f64;
        // SAFETY: a live zset key handle and a live member string.
        let found =
            unsafe { zscore(self.key, member.ptr, &mut score) } == raw::REDISMODULE_OK as c_int;
        found.then_some(score)
    }

    /// `f` of each member with score ≤ `max` and its score, lowest first (ties by member, as
    /// ZRANGE), at most `limit`, collected into a vector sized once (a batch peeks a hundred).
    /// Empty when the key is not a zset.
    pub fn zrange_to<T>(&self, max: f64, limit: usize, mut f: impl FnMut(Str, f64) -> T) -> Vec<T> {
        let mut out = Vec::with_capacity(limit.min(self.len()));
        self.zrange_each(max, limit, |member, score| out.push(f(member, score)));
        out
    }

    /// How many members, fields or entries the key holds (0 when it is empty).
    fn len(&self) -> usize {
        if self.key.is_null() {
            return 0;
        }
        // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
        let Some(length) = (unsafe { raw::RedisModule_ValueLength }) else {
            return 0;
        };
        // SAFETY: a live, non-NULL key handle.
        unsafe { length(self.key) }
    }

    /// The lowest member (ties by member, as ZPOPMIN) with its score; `None` when the key is
    /// not a zset.
    pub fn lowest(&self) -> Option<(Str, f64)> {
        let mut out = None;
        self.zrange_each(f64::INFINITY, 1, |member, score| {
            out = Some((member, score))
        });
        out
    }

    /// `f` on each of the first `limit` members with score ≤ `max`, lowest first.
    fn zrange_each(&self, max: f64, limit: usize, mut f: impl FnMut(Str, f64)) {
        if self.kind() != Kind::Zset || limit == 0 {
            return;
        }
        // SAFETY: a live zset key handle; every element string is ours (released when its
        // `Str` drops); the range is stopped before returning.
        unsafe {
            let (Some(first), Some(current), Some(next), Some(end), Some(stop)) = (
                raw::RedisModule_ZsetFirstInScoreRange,
                raw::RedisModule_ZsetRangeCurrentElement,
                raw::RedisModule_ZsetRangeNext,
                raw::RedisModule_ZsetRangeEndReached,
                raw::RedisModule_ZsetRangeStop,
            ) else {
                return;
            };
            if first(self.key, f64::NEG_INFINITY, max, 0, 0) != raw::REDISMODULE_OK as c_int {
                return;
            }
            let mut seen = 0;
            while seen < limit && end(self.key) == 0 {
                let mut score = 0f64;
                let ele = current(self.key, &mut score);
                if ele.is_null() {
                    break;
                }
                f(Str::own(ele, self.ctx), score);
                seen += 1;
                if next(self.key) == 0 {
                    break;
                }
            }
            stop(self.key);
        }
    }

    /// One field's value, as HGET: `Some(None)` when absent (or the key is empty); `None`
    /// when the key is not a hash or the host refuses.
    pub fn hash_get(&self, field: &Str) -> Option<Option<Str>> {
        match self.kind() {
            Kind::Empty => return Some(None),
            Kind::Hash => {}
            _ => return None,
        }
        // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
        let get = unsafe { raw::RedisModule_HashGet }?;
        let mut v = ptr::null_mut::<raw::RedisModuleString>();
        // SAFETY: a live hash key handle and field string; the list ends with NULL; a
        // returned string is ours (released when its `Str` drops).
        let rc = unsafe {
            get(
                self.key,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.ptr,
                &mut v as *mut *mut raw::RedisModuleString,
                ptr::null::<c_char>(),
            )
        };
        if rc != raw::REDISMODULE_OK as c_int {
            return None;
        }
        // SAFETY: a string the server handed us, ours to release.
        Some((!v.is_null()).then(|| unsafe { Str::own(v, self.ctx) }))
    }

    /// HSET of `fields` (field, value, field, value, …) on a key opened for write (a hash or
    /// nothing), up to four pairs per `RM_HashSet` call (it is variadic: one call per row, not
    /// one per field): how many fields are new.
    pub fn hash_set_all<S: std::borrow::Borrow<Str>>(&self, fields: &[S]) -> Option<i64> {
        if !matches!(self.kind(), Kind::Hash | Kind::Empty) || !fields.len().is_multiple_of(2) {
            return None;
        }
        // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
        let set = unsafe { raw::RedisModule_HashSet }?;
        let (key, flags, end) = (
            self.key,
            raw::REDISMODULE_HASH_NONE as c_int,
            ptr::null::<c_char>(),
        );
        let mut new = 0;
        for pairs in fields.chunks(8) {
            let s = |i: usize| pairs[i].borrow().ptr;
            // SAFETY: a live write handle; field and value strings are copied into the hash;
            // the argument list ends with NULL. It answers how many fields existed (updated).
            let updated = unsafe {
                match pairs.len() {
                    2 => set(key, flags, s(0), s(1), end),
                    4 => set(key, flags, s(0), s(1), s(2), s(3), end),
                    6 => set(key, flags, s(0), s(1), s(2), s(3), s(4), s(5), end),
                    _ => set(
                        key,
                        flags,
                        s(0),
                        s(1),
                        s(2),
                        s(3),
                        s(4),
                        s(5),
                        s(6),
                        s(7),
                        end,
                    ),
                }
            };
            new += (pairs.len() / 2) as i64 - i64::from(updated);
        }
        Some(new)
    }

    /// ZADD of one member on a key opened for write (a zset or nothing): `Some(true)` when
    /// the member is new.
    pub fn zadd(&self, score: f64, member: &Str) -> Option<bool> {
        if !matches!(self.kind(), Kind::Zset | Kind::Empty) {
            return None;
        }
        // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
        let add = unsafe { raw::RedisModule_ZsetAdd }?;
        let mut flags: c_int = 0;
        // SAFETY: a live write handle and member string.
        let ok =
            unsafe { add(self.key, score, member.ptr, &mut flags) } == raw::REDISMODULE_OK as c_int;
        ok.then_some(flags & raw::REDISMODULE_ZADD_ADDED as c_int != 0)
    }

    /// ZREM of one member: `Some(true)` when it was there.
    pub fn zrem(&self, member: &Str) -> Option<bool> {
        match self.kind() {
            Kind::Empty => return Some(false),
            Kind::Zset => {}
            _ => return None,
        }
        // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
        let rem = unsafe { raw::RedisModule_ZsetRem }?;
        let mut deleted: c_int = 0;
        // SAFETY: a live write handle on a zset and a member string.
        let ok = unsafe { rem(self.key, member.ptr, &mut deleted) } == raw::REDISMODULE_OK as c_int;
        ok.then_some(deleted != 0)
    }

    /// XADD with an automatic id on a key opened for write (a stream or nothing), then an
    /// exact trim to `maxlen` entries: the id given, as `(ms, seq)`.
    pub fn stream_add(&self, fields: &[Str], maxlen: i64) -> Option<(u64, u64)> {
        if !matches!(self.kind(), Kind::Stream | Kind::Empty) || !fields.len().is_multiple_of(2) {
            return None;
        }
        let (add, trim) = unsafe {
            (
                raw::RedisModule_StreamAdd?,
                raw::RedisModule_StreamTrimByLength?,
            )
        };
        let mut argv: Vec<*mut raw::RedisModuleString> = fields.iter().map(|s| s.ptr).collect();
        let mut id = raw::RedisModuleStreamID { ms: 0, seq: 0 };
        // SAFETY: a live write handle; `argv` holds live field/value strings, copied into the
        // stream; `id` receives the id given.
        let added = unsafe {
            add(
                self.key,
                raw::REDISMODULE_STREAM_ADD_AUTOID as c_int,
                &mut id,
                argv.as_mut_ptr(),
                (fields.len() / 2) as i64,
            )
        };
        if added != raw::REDISMODULE_OK as c_int {
            return None;
        }
        // SAFETY: the same live stream handle; flags 0 = an exact trim.
        (unsafe { trim(self.key, 0, maxlen) } >= 0).then_some((id.ms, id.seq))
    }

    /// Expire the key at `at_ms` (absolute, ms): `Some(true)` when it was set.
    pub fn expire_at(&self, at_ms: i64) -> Option<bool> {
        if self.kind() == Kind::Empty {
            return Some(false);
        }
        let set = unsafe { raw::RedisModule_SetAbsExpire }?;
        // SAFETY: a live write handle on an existing key.
        Some(unsafe { set(self.key, at_ms) } == raw::REDISMODULE_OK as c_int)
    }

    /// Delete the key: `Some(true)` when it existed.
    pub fn delete(&self) -> Option<bool> {
        if self.kind() == Kind::Empty {
            return Some(false);
        }
        // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
        let del = unsafe { raw::RedisModule_DeleteKey }?;
        // SAFETY: a live write handle.
        (unsafe { del(self.key) } == raw::REDISMODULE_OK as c_int).then_some(true)
    }

    /// Fire a keyspace event for this key, when the server has that class enabled.
    pub fn notify(&self, class: c_int, event: &std::ffi::CStr) {
        // SAFETY: plain reads of the server's flags; a live context and key name.
        unsafe {
            let (Some(flags), Some(notify)) = (
                raw::RedisModule_GetNotifyKeyspaceEvents,
                raw::RedisModule_NotifyKeyspaceEvent,
            ) else {
                return;
            };
            if flags() & class != 0 {
                notify(self.ctx, class, event.as_ptr(), self.name.ptr);
            }
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if !self.key.is_null() {
            // SAFETY: reads the API table entry `RedisModule_Init` filled once at load, before any command runs.
            if let Some(close) = unsafe { raw::RedisModule_CloseKey } {
                // SAFETY: opened by us, closed once (a write handle signals the change).
                unsafe { close(self.key) };
            }
        }
    }
}

/// COMMAND DOCS summary of every row.
const SUMMARY: &std::ffi::CStr = c"EchoMQ job core, native (trafikey)";

static INFO_VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
};

/// Register one command: `CreateCommand`, then `SetCommandInfo` with its arity and, for a
/// verb with `numkeys` = Some(N), one key-spec: the N keys at argv positions 2..=N+1 (after
/// the numkeys argument), read and written. A range spec also fills the command's legacy
/// key range, which cluster routing reads.
pub fn register(
    ctx: &Context,
    name: &str,
    callback: Callback,
    flags: &str,
    arity: i32,
    numkeys: Option<usize>,
) -> Result<(), String> {
    let fail = |what: &str| format!("trafikey: {what} failed for {name}");
    let c_name = CString::new(name).map_err(|_| fail("name"))?;
    let c_flags = CString::new(flags).map_err(|_| fail("flags"))?;
    // SAFETY: reads the API table entries `RedisModule_Init` filled at load (this runs in OnLoad, after it).
    let (Some(create), Some(get), Some(set_info)) = (
        unsafe { raw::RedisModule_CreateCommand },
        unsafe { raw::RedisModule_GetCommand },
        unsafe { raw::RedisModule_SetCommandInfo },
    ) else {
        return Err(fail("the command API lookup"));
    };
    // SAFETY: called from OnLoad with its context; the strings outlive the calls (the server
    // copies what it keeps).
    let status = unsafe {
        create(
            ctx.ctx,
            c_name.as_ptr(),
            Some(callback),
            c_flags.as_ptr(),
            0,
            0,
            0,
        )
    };
    if status != raw::REDISMODULE_OK as c_int {
        return Err(fail("CreateCommand"));
    }
    // SAFETY: OnLoad's context, and the command just created under `c_name`, which outlives the call.
    let command = unsafe { get(ctx.ctx, c_name.as_ptr()) };
    if command.is_null() {
        return Err(fail("GetCommand"));
    }
    let mut specs = match numkeys {
        Some(n) => get_redis_key_spec(vec![KeySpec::new(
            None,
            KeySpecFlags::READ_WRITE | KeySpecFlags::ACCESS | KeySpecFlags::UPDATE,
            BeginSearch::new_index(2),
            FindKeys::new_range(n as i32 - 1, 1, 0),
        )]),
        None => Vec::new(),
    };
    let info = raw::RedisModuleCommandInfo {
        version: &INFO_VERSION,
        summary: SUMMARY.as_ptr(),
        complexity: ptr::null(),
        since: ptr::null(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity,
        key_specs: if specs.is_empty() {
            ptr::null_mut()
        } else {
            specs.as_mut_ptr()
        },
        args: ptr::null_mut(),
    };
    // SAFETY: `command` came from GetCommand; `info` and its arrays live across the call.
    if unsafe { set_info(command, &info) } != raw::REDISMODULE_OK as c_int {
        return Err(fail("SetCommandInfo"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{key_tag, length_bit};

    #[test]
    fn a_tag_tells_apart_the_keys_of_one_batch() {
        let row = |id: &str| format!("emq:{{q}}:job:{id}").into_bytes();
        assert_eq!(
            key_tag(&row("0Vcf0ojLWOZhHnMW")),
            key_tag(&row("0Vcf0ojLWOZhHnMW"))
        );
        // time-ordered ids of one process differ at their end
        assert_ne!(
            key_tag(&row("0Vcf0ojLWOZhHnMW")),
            key_tag(&row("0Vcf0ojLWOZhHnMX"))
        );
        // one tail, two lengths
        assert_ne!(key_tag(b"emq:{q}:pending"), key_tag(b"emq:{qq}:pending"));
        assert_ne!(key_tag(b""), key_tag(b"a"));
    }

    #[test]
    fn lengths_share_a_bit_only_sixty_four_apart() {
        assert_ne!(length_bit(16), length_bit(32));
        assert_eq!(length_bit(16), length_bit(80));
    }
}
