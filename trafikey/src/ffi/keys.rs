//! Key handles ([`Key`]): a key opened for read, or for read and write, its type, its hash,
//! zset and stream read and written without the command path, its expiry and deletion; the
//! keyspace notification of each write, and the modified-key signal WATCH sees.

use std::ffi::{c_char, c_int};
use std::ptr;

use valkey_module::{raw, Context};

use super::strings::{same, Str};

/// Signal a key written through a key handle as modified (`RM_SignalModifiedKey`): WATCH and
/// client tracking see the change. The module turns the server's implicit signal at a write
/// handle's close off ([`set_options`]), so a handle opened for a write the checks then refuse
/// touches no WATCHed key.
pub fn signal_modified(ctx: &Context, key: &Str) {
    if let Some(signal) = api!(RedisModule_SignalModifiedKey) {
        // SAFETY: a live context with a selected database, and a live key string.
        unsafe { signal(ctx.ctx, key.ptr) };
    }
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
    let last = match name.last_chunk::<8>() {
        // a key, an id: one load
        Some(last) => *last,
        None => {
            let mut last = [0u8; 8];
            last[..name.len()].copy_from_slice(name);
            last
        }
    };
    u64::from_le_bytes(last) ^ (name.len() as u64).rotate_right(16)
}

impl Key {
    fn open_mode(ctx: &Context, name: Str, mode: u32) -> Option<Key> {
        let open = api!(RedisModule_OpenKey)?;
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

    /// Does the key hold a `kind` (`Some(true)`), nothing (`Some(false)`: a read finds no value),
    /// or another type (`None`: the read is refused)?
    fn holds(&self, kind: Kind) -> Option<bool> {
        match self.kind() {
            Kind::Empty => Some(false),
            found if found == kind => Some(true),
            _ => None,
        }
    }

    pub fn kind(&self) -> Kind {
        if self.key.is_null() {
            return Kind::Empty;
        }
        let Some(key_type) = (api!(RedisModule_KeyType)) else {
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
        let zscore = api!(RedisModule_ZsetScore)?;
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
    pub(crate) fn len(&self) -> usize {
        if self.key.is_null() {
            return 0;
        }
        let Some(length) = (api!(RedisModule_ValueLength)) else {
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
        let (Some(first), Some(current), Some(next), Some(end), Some(stop)) = (
            api!(RedisModule_ZsetFirstInScoreRange),
            api!(RedisModule_ZsetRangeCurrentElement),
            api!(RedisModule_ZsetRangeNext),
            api!(RedisModule_ZsetRangeEndReached),
            api!(RedisModule_ZsetRangeStop),
        ) else {
            return;
        };
        // SAFETY: a live zset key handle; every element string is ours (released when its
        // `Str` drops); the range is stopped before returning.
        unsafe {
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
        if !self.holds(Kind::Hash)? {
            return Some(None);
        }
        let get = api!(RedisModule_HashGet)?;
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

    /// Does the hash have `field` (HEXISTS: no copy of its value is made)? `None` when the key
    /// is not a hash or the host refuses.
    pub fn hash_has(&self, field: &Str) -> Option<bool> {
        if !self.holds(Kind::Hash)? {
            return Some(false);
        }
        let get = api!(RedisModule_HashGet)?;
        let mut exists: c_int = 0;
        // SAFETY: a live hash key handle and field string; with HASH_EXISTS the slot after the
        // field receives an int; the list ends with NULL.
        let rc = unsafe {
            get(
                self.key,
                raw::REDISMODULE_HASH_EXISTS as c_int,
                field.ptr,
                &mut exists as *mut c_int,
                ptr::null::<c_char>(),
            )
        };
        (rc == raw::REDISMODULE_OK as c_int).then_some(exists != 0)
    }

    /// HSET of `fields` (field, value, field, value, …) on a key opened for write (a hash or
    /// nothing), up to four pairs per `RM_HashSet` call (it is variadic: one call per row, not
    /// one per field): how many fields are new.
    pub fn hash_set_all<S: std::borrow::Borrow<Str>>(&self, fields: &[S]) -> Option<i64> {
        if !matches!(self.kind(), Kind::Hash | Kind::Empty) || !fields.len().is_multiple_of(2) {
            return None;
        }
        let set = api!(RedisModule_HashSet)?;
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
        let add = api!(RedisModule_ZsetAdd)?;
        let mut flags: c_int = 0;
        // SAFETY: a live write handle and member string.
        let ok =
            unsafe { add(self.key, score, member.ptr, &mut flags) } == raw::REDISMODULE_OK as c_int;
        ok.then_some(flags & raw::REDISMODULE_ZADD_ADDED as c_int != 0)
    }

    /// ZREM of one member: `Some(true)` when it was there.
    pub fn zrem(&self, member: &Str) -> Option<bool> {
        if !self.holds(Kind::Zset)? {
            return Some(false);
        }
        let rem = api!(RedisModule_ZsetRem)?;
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
        let (add, trim) = (
            api!(RedisModule_StreamAdd)?,
            api!(RedisModule_StreamTrimByLength)?,
        );
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
        let set = api!(RedisModule_SetAbsExpire)?;
        // SAFETY: a live write handle on an existing key.
        Some(unsafe { set(self.key, at_ms) } == raw::REDISMODULE_OK as c_int)
    }

    /// Delete the key: `Some(true)` when it existed.
    pub fn delete(&self) -> Option<bool> {
        if self.kind() == Kind::Empty {
            return Some(false);
        }
        let del = api!(RedisModule_DeleteKey)?;
        // SAFETY: a live write handle.
        (unsafe { del(self.key) } == raw::REDISMODULE_OK as c_int).then_some(true)
    }

    /// Fire a keyspace event for this key, when the server has that class enabled.
    pub fn notify(&self, class: c_int, event: &std::ffi::CStr) {
        let (Some(flags), Some(notify)) = (
            api!(RedisModule_GetNotifyKeyspaceEvents),
            api!(RedisModule_NotifyKeyspaceEvent),
        ) else {
            return;
        };
        // SAFETY: a plain read of the server's flags; a live context and key name.
        unsafe {
            if flags() & class != 0 {
                notify(self.ctx, class, event.as_ptr(), self.name.ptr);
            }
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if !self.key.is_null() {
            if let Some(close) = api!(RedisModule_CloseKey) {
                // SAFETY: opened by us, closed once (a write handle signals the change).
                unsafe { close(self.key) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::key_tag;

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
}
