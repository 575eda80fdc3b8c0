//! Blocking a client on keys (`RM_BlockClientOnKeys`, for BCLAIM), signalling a key ready
//! (`RM_SignalKeyAsReady`), and the key a wake was signalled for.

use std::ffi::c_int;
use std::ptr;

use valkey_module::{raw, Context};

use super::dispatch::Callback;
use super::strings::{string_bytes, Str};

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
    let Some(block) = (api!(RedisModule_BlockClientOnKeys)) else {
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
    if let Some(signal) = api!(RedisModule_SignalKeyAsReady) {
        // SAFETY: a live context with a selected database, and a live key string.
        unsafe { signal(ctx.ctx, key.ptr) };
    }
}

/// The key whose signal runs this wake (`RM_GetBlockedClientReadyKey`), as bytes; empty when
/// the server names none.
///
/// # Safety
/// `ctx` is the live context of a reply callback of `RM_BlockClientOnKeys`; the slice borrows
/// the key string it holds and must not outlive the callback.
pub(super) unsafe fn ready_key<'a>(ctx: *mut raw::RedisModuleCtx) -> &'a [u8] {
    let Some(get) = (api!(RedisModule_GetBlockedClientReadyKey)) else {
        return &[];
    };
    // SAFETY: a reply callback's context, as promised by the caller.
    let key = unsafe { get(ctx) };
    if key.is_null() {
        return &[];
    }
    // SAFETY: the ready key, alive for the callback, as promised by the caller.
    unsafe { string_bytes(key) }
}
