//! Module strings: [`Str`], one held reference to a server string (or a view of one that
//! outlives it), read as bytes; the shared names every command may use, made once; and
//! [`Names`], a command's strings (the shared ones, the last few made, the command's own
//! arguments) so that a key or member is made once and reused.

use std::ffi::c_char;
use std::ptr;

use valkey_module::raw;

use super::dispatch::{argument, length_bit, running_line, Line};
use super::keys::key_tag;

/// # Safety
/// `s` must be a live module string; the slice borrows it and must not outlive it.
pub(super) unsafe fn string_bytes<'a>(s: *const raw::RedisModuleString) -> &'a [u8] {
    let Some(ptr_len) = api!(RedisModule_StringPtrLen) else {
        return &[];
    };
    let mut len: usize = 0;
    // SAFETY: a live string, as promised by the caller; `len` receives its length.
    let p = unsafe { ptr_len(s, &mut len) };
    if p.is_null() {
        return &[];
    }
    // SAFETY: the server's buffer of `len` bytes, alive as long as the string (the caller's
    // promise bounds the slice's lifetime).
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }
}

/// A module string we hold one reference to (created by us, retained, or handed to us by
/// the server), released on drop; or a view of a shared field name, which lives as long as
/// the module and is never released. Borrowed as bytes; never written.
pub struct Str {
    pub(super) ptr: *mut raw::RedisModuleString,
    pub(super) ctx: *mut raw::RedisModuleCtx,
    /// Its bytes, read once (a string we hold is never changed).
    pub(super) data: *const u8,
    pub(super) len: usize,
    /// Does this value hold a reference (released on drop)? False for a view of a shared name
    /// or of the running command's argument.
    pub(super) counted: bool,
}

impl Str {
    /// Take over one reference to a live string (`ctx` = the context it was handed with).
    ///
    /// # Safety
    /// `ptr` is a live, non-NULL module string whose reference we now own.
    pub(super) unsafe fn own(
        ptr: *mut raw::RedisModuleString,
        ctx: *mut raw::RedisModuleCtx,
    ) -> Str {
        // SAFETY: a live string, as promised by the caller; its bytes are kept as a pointer
        // and a length, valid while the reference taken over here is held.
        let bytes = unsafe { string_bytes(ptr) };
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
        let create = api!(RedisModule_CreateString)?;
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
            let retain = api!(RedisModule_RetainString)?;
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
        if let Some(free) = api!(RedisModule_FreeString) {
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
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.last() == b.last() && a == b
}

/// How many recently used strings are kept for reuse, from one command to the next (a key
/// name is checked, opened and replicated several times; a member is read, then written; a
/// queue's meta and counter keys are asked for by every command). A string found is swapped
/// to the end, a new one pushed there, and the first goes: nearly the least recently used,
/// with no shifting of the others on a hit.
const RECENT: usize = 8;

/// How many leased rows' key strings are kept from one command to the next: a batch's settle
/// (PUBLISHES, COMPLETES) asks for the rows its claim (CLAIMS) made a round trip earlier, with
/// other workers' batches of ten between.
const LEASED_ROWS: usize = 32;

/// The last `N` values pushed, each with its [`key_tag`]; the oldest goes when a new one comes.
struct Ring<T, const N: usize> {
    slots: Vec<(u64, T)>,
    next: usize,
}

impl<T, const N: usize> Ring<T, N> {
    const fn new() -> Self {
        Ring {
            slots: Vec::new(),
            next: 0,
        }
    }

    fn push(&mut self, tag: u64, value: T) {
        if self.slots.len() < N {
            self.slots.reserve_exact(N);
            self.slots.push((tag, value));
        } else {
            self.slots[self.next] = (tag, value);
        }
        self.next = (self.next + 1) % N;
    }

    /// The value with `tag` that `is` accepts, the newest first.
    fn find(&self, tag: u64, is: impl Fn(&T) -> bool) -> Option<&T> {
        if self.slots.is_empty() {
            return None;
        }
        // the newest is the one before `next`: from it back to the first, then from the last
        let newest = (self.next + self.slots.len() - 1) % self.slots.len();
        let (head, tail) = self.slots.split_at(newest + 1);
        head.iter()
            .rev()
            .chain(tail.iter().rev())
            .find(|(t, v)| *t == tag && is(v))
            .map(|(_, v)| v)
    }
}

thread_local! {
    /// The key strings of the rows the last claims leased ([`Names::hold_leased`]): values
    /// found again, not an emptied vector (so not a `crate::kept::Shelf`).
    static LEASED: std::cell::RefCell<Ring<Str, LEASED_ROWS>> =
        const { std::cell::RefCell::new(Ring::new()) };
}

/// One command's module strings: the shared names, the ones the command holds, the last few
/// made (reused), the command's own arguments (borrowed); else a new one.
pub struct Names {
    /// The running command's line, read once.
    line: Line,
    /// Where the next argument is looked for first: after the last one found.
    next_argument: std::cell::Cell<usize>,
    recent: std::cell::RefCell<Vec<Str>>,
    /// The strings the command holds until it ends ([`Names::hold`]), each with its
    /// [`key_tag`]: a batch's row keys and ids, which it checks, then writes after the whole
    /// batch's checks (more than the recent ones keep).
    held: std::cell::RefCell<Vec<(u64, Str)>>,
    /// The last held string found (or held): the next is looked for around it.
    last_held: std::cell::Cell<usize>,
    /// The held strings' lengths, one bit each (as [`Line`]'s).
    held_lengths: std::cell::Cell<u64>,
}

impl Names {
    /// The running command's names, kept in `recent` and `held` (empty vectors).
    pub fn new(recent: Vec<Str>, held: Vec<(u64, Str)>) -> Names {
        Names {
            line: running_line(),
            next_argument: std::cell::Cell::new(0),
            recent: std::cell::RefCell::new(recent),
            held: std::cell::RefCell::new(held),
            last_held: std::cell::Cell::new(0),
            held_lengths: std::cell::Cell::new(0),
        }
    }

    /// The recent strings, handed back to be kept for the next command (strings made with
    /// no context: they outlive the command), and the held ones' vector, emptied.
    pub fn take_kept(&self) -> (Vec<Str>, Vec<(u64, Str)>) {
        let mut held = self.held.take();
        held.clear();
        (self.recent.take(), held)
    }

    /// A new string for `bytes`, held until the command ends: found again by its bytes by every
    /// later ask ([`Names::get`], [`Names::with`]) of the command, however many others are
    /// made meanwhile. Not looked for first: a verb holds each of its batch's keys once, before
    /// it asks for it (a batch's keys are seldom among the recent names).
    pub fn hold(&self, bytes: &[u8]) -> Option<Str> {
        self.held(Str::new(bytes)?)
    }

    /// [`Names::hold`] of a row the command leases: its string also kept for the commands
    /// that settle it ([`Names::hold_again`]), past this one's end.
    pub fn hold_leased(&self, bytes: &[u8]) -> Option<Str> {
        let s = self.hold(bytes)?;
        let kept = s.retain()?;
        LEASED.with(|leased| leased.borrow_mut().push(key_tag(&kept), kept));
        Some(s)
    }

    /// [`Names::hold`] of a row a recent command may have leased: its string found again when it
    /// is among the leased rows kept, no new one made.
    pub fn hold_again(&self, bytes: &[u8]) -> Option<Str> {
        let tag = key_tag(bytes);
        let found = LEASED.with(|leased| {
            leased
                .borrow()
                .find(tag, |s| same(s.bytes(), bytes))
                .and_then(Str::retain)
        });
        self.held(match found {
            Some(s) => s,
            None => Str::new(bytes)?,
        })
    }

    /// Hold `s` (a string the server handed over, a peeked member) as [`Names::hold`] holds
    /// what it makes.
    pub fn hold_str(&self, s: &Str) -> Option<()> {
        self.keep_held(s.retain()?);
        Some(())
    }

    /// `s`, held until the command ends (one more reference kept).
    fn held(&self, s: Str) -> Option<Str> {
        self.keep_held(s.retain()?);
        Some(s)
    }

    fn keep_held(&self, s: Str) {
        let mut held = self.held.borrow_mut();
        // the next ask is most likely for it (a check follows its hold)
        self.last_held.set(held.len());
        self.held_lengths
            .set(self.held_lengths.get() | length_bit(s.len()));
        held.push((key_tag(s.bytes()), s));
    }

    /// The string for `bytes`, one more reference to it.
    pub fn get(&self, bytes: &[u8]) -> Option<Str> {
        self.with(bytes, Str::retain).flatten()
    }

    /// `f` on the string for `bytes`, borrowed for the call (no reference of its own: for a
    /// string used and let go, such as a key whose ACL is checked). `f` must not ask for names.
    pub fn with<T>(&self, bytes: &[u8], f: impl FnOnce(&Str) -> T) -> Option<T> {
        match self.find(bytes, f) {
            Ok(found) => Some(found),
            Err(f) => {
                let mut recent = self.recent.borrow_mut();
                keep(&mut recent, Str::new(bytes)?);
                recent.last().map(f)
            }
        }
    }

    /// `f` on the command's string for `bytes` when it has one; `f` handed back when not.
    fn find<T, F: FnOnce(&Str) -> T>(&self, bytes: &[u8], f: F) -> Result<T, F> {
        // a key, an id or a time is longer than every shared name and is not the epoch
        let short = bytes.len() <= SHARED_LONGEST
            || crate::epoch::current().is_some_and(|e| e.len() == bytes.len());
        if let Some(s) = short.then(|| shared(bytes)).flatten() {
            return Ok(f(&s));
        }
        {
            let held = self.held.borrow();
            // a time or a field value is seldom as long as a held key: most asks skip them
            if self.held_lengths.get() & length_bit(bytes.len()) != 0 {
                // a batch asks for its held strings in the order it held them, each a few
                // times, a key and its member in turns: looked for from the one before the
                // last found, then from the start
                let tag = key_tag(bytes);
                if let Some(at) = around(self.last_held.get(), held.len())
                    .find(|&i| held[i].0 == tag && same(held[i].1.bytes(), bytes))
                {
                    self.last_held.set(at);
                    return Ok(f(&held[at].1));
                }
            }
        }
        let mut recent = self.recent.borrow_mut();
        if let Some(at) = recent.iter().rposition(|s| same(s.bytes(), bytes)) {
            let last = recent.len() - 1;
            recent.swap(at, last);
            return Ok(f(&recent[last]));
        }
        if let Some((at, s)) = argument(self.line, bytes, self.next_argument.get()) {
            self.next_argument.set(at + 1);
            return Ok(f(&s));
        }
        Err(f)
    }
}

/// The order the held strings are looked through in, `len` of them, `last` the one found last:
/// from the one before it to the end, then from the start.
fn around(last: usize, len: usize) -> impl Iterator<Item = usize> {
    let from = last.saturating_sub(1).min(len);
    (from..len).chain(0..from)
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

#[cfg(test)]
mod tests {
    use super::{around, Ring};

    #[test]
    fn a_ring_keeps_the_last_n_and_finds_the_newest_first() {
        let mut ring: Ring<&str, 3> = Ring::new();
        assert_eq!(ring.find(1, |_| true), None);
        for (tag, v) in [(1, "a"), (2, "b"), (1, "c")] {
            ring.push(tag, v);
        }
        // two values share tag 1: the newest first, or the one the test accepts
        assert_eq!(ring.find(1, |_| true), Some(&"c"));
        assert_eq!(ring.find(1, |v| *v == "a"), Some(&"a"));
        // a fourth push drops the oldest ("a"), whatever its tag
        ring.push(4, "d");
        assert_eq!(ring.find(1, |v| *v == "a"), None);
        assert_eq!(ring.find(4, |_| true), Some(&"d"));
        assert_eq!(ring.find(2, |_| true), Some(&"b"));
        assert_eq!(ring.find(1, |_| true), Some(&"c"));
        assert_eq!(ring.find(9, |_| true), None);
    }

    #[test]
    fn held_strings_are_looked_through_from_the_one_before_the_last_found() {
        let order = |last, len| around(last, len).collect::<Vec<_>>();
        // CLAIMS holds each head then its row; its writes ask head, row, head, next head…
        assert_eq!(order(3, 6), [2, 3, 4, 5, 0, 1]);
        assert_eq!(order(0, 4), [0, 1, 2, 3]);
        // each one looked at once, even past the end
        assert_eq!(order(9, 4), [0, 1, 2, 3]);
        assert_eq!(order(0, 0), Vec::<usize>::new());
    }
}
