//! Host glue: the only place the verbs touch the server. Reads and writes go through the
//! module API's key handles, not the command path (a verb made of inner commands costs what
//! those commands cost; see NATIVE-NOTES "Speed"). Every write is then replicated as its
//! effect, the concrete command with the values written (`RM_Replicate`; HSETEX, run as a
//! command, as the server propagates the command it ran), so replicas and the AOF replay what
//! the primary did, never the verb; the server wraps one command's effects in one MULTI/EXEC.

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, CStr};

use valkey_module::raw::{
    REDISMODULE_NOTIFY_GENERIC, REDISMODULE_NOTIFY_HASH, REDISMODULE_NOTIFY_STREAM,
    REDISMODULE_NOTIFY_ZSET,
};
use valkey_module::{Context, ValkeyError, ValkeyValue};

use crate::decide::{
    incr, num, probing_pays, row_lookup, string2ll, Cmd, Expect, Op, LEASED_FIELDS,
};
use crate::errors::{printable, Refusal};
use crate::ffi::{self, Caller, Key, Kind, Names, Str};
use crate::kept::Shelf;

const NOTIFY_GENERIC: c_int = REDISMODULE_NOTIFY_GENERIC;
const NOTIFY_HASH: c_int = REDISMODULE_NOTIFY_HASH;
const NOTIFY_ZSET: c_int = REDISMODULE_NOTIFY_ZSET;
const NOTIFY_STREAM: c_int = REDISMODULE_NOTIFY_STREAM;

/// What a write answered, as its verification reads it: an integer, a bulk string (an XADD's
/// id), or the member a ZPOPMIN popped.
#[derive(Debug)]
pub enum Reply {
    Int(i64),
    Bulk(Vec<u8>),
    Popped(Str),
}

/// One verb's view of the server.
pub struct Host<'c> {
    pub ctx: &'c Context,
    pub verb: &'static str,
    names: Names,
    /// Read handles kept until the first write (see `read`).
    reads: RefCell<Vec<Key>>,
    /// Read-and-write handles of the keys this command writes, kept for the whole command
    /// (see `target`).
    targets: RefCell<Vec<Key>>,
    /// The effect being built (`write_run`), empty between writes.
    effect: RefCell<Vec<Str>>,
    /// Effects held back to be merged with later ones of the same command on the same key,
    /// replicated at the end of `apply` (see `replicate`).
    held: RefCell<Vec<Effect>>,
    /// Emptied argument vectors of replicated held effects, for the next ones.
    spent: RefCell<Vec<Vec<Str>>>,
}

/// An effect to replicate: the command and its arguments, its key first.
struct Effect {
    cmd: Cmd,
    args: Vec<Str>,
}

/// May several effects of `cmd` on one key travel as one (`ZADD k s1 m1 s2 m2`, `ZREM k m1
/// m2`)? A plain ZADD (no flags: the host plans none) or a ZREM, applied one after the other,
/// leaves exactly what one with all their arguments leaves.
fn merges(cmd: Cmd) -> bool {
    matches!(cmd, Cmd::Zadd | Cmd::Zrem | Cmd::Del)
}

/// Does a held effect write `key`: its own key, or, a DEL, any key it deletes (the DELs of one
/// command travel as one `DEL k1 k2 …`: every key of a command shares the queue's slot)?
fn touches(effect: &Effect, key: &[u8]) -> bool {
    match effect.cmd {
        Cmd::Del => effect.args.iter().any(|k| k[..] == *key),
        _ => effect.args[0][..] == *key,
    }
}

/// A host's vectors, kept from one command to the next so that a command allocates none of
/// them: emptied, except the recent strings (a host made while another is alive, which no
/// verb does, gets new ones).
#[derive(Default)]
struct Spare {
    recent: Vec<Str>,
    held_names: Vec<(u64, Str)>,
    reads: Vec<Key>,
    targets: Vec<Key>,
    effect: Vec<Str>,
    held: Vec<Effect>,
    spent: Vec<Vec<Str>>,
}

thread_local! {
    // not a `kept::Shelf`: seven vectors (one, the recent strings, a cache, not emptied) taken
    // and put back in one lookup a command
    static SPARE: Cell<Option<Spare>> = const { Cell::new(None) };
}

impl Drop for Host<'_> {
    fn drop(&mut self) {
        // the recent strings stay for the next command; the handles are closed (read handles
        // first, then write handles, in the order they were opened)
        let (recent, held) = self.names.take_kept();
        let mut spare = Spare {
            recent,
            held_names: held,
            reads: self.reads.take(),
            targets: self.targets.take(),
            effect: self.effect.take(),
            held: self.held.take(),
            spent: self.spent.take(),
        };
        // `apply` replicates what it held before it returns
        debug_assert!(spare.held.is_empty());
        spare.reads.clear();
        spare.targets.clear();
        spare.effect.clear();
        SPARE.with(|s| s.set(Some(spare)));
    }
}

/// How many read handles a command keeps.
const KEPT_READS: usize = 4;

/// A row (or hash) read: each asked field's value, `None` when absent. Its vector comes from,
/// and goes back to, a few kept between commands (a lifecycle reads four rows or metas, a
/// batch one a job).
pub struct Seen(Vec<Option<Str>>);

/// How many emptied `Seen` vectors are kept: a batch (PUBLISHES, CLAIMS) holds each job's read
/// until its writes, and the worker's batches are ten jobs; a vector not kept is one more
/// malloc and free of the command (glibc keeps only seven chunks of a size at hand).
const KEPT_SEEN: usize = 16;

thread_local! {
    static SEEN: Shelf<Option<Str>, KEPT_SEEN> = const { Shelf::new(1..=usize::MAX) };
}

impl Seen {
    fn new() -> Seen {
        Seen(SEEN.with(Shelf::take))
    }

    /// Field `i`'s value, taken out (`None` after).
    pub fn take(&mut self, i: usize) -> Option<Str> {
        self.0.get_mut(i)?.take()
    }
}

impl std::ops::Deref for Seen {
    type Target = [Option<Str>];
    fn deref(&self) -> &[Option<Str>] {
        &self.0
    }
}

impl Drop for Seen {
    fn drop(&mut self) {
        let fields = std::mem::take(&mut self.0);
        SEEN.with(|kept| kept.put(fields));
    }
}

/// The ACL key permission bits of a read, and of a write (an update, insert or delete).
const READ_PERMS: u32 = valkey_module::raw::REDISMODULE_CMD_KEY_ACCESS;
const WRITE_PERMS: u32 = valkey_module::raw::REDISMODULE_CMD_KEY_UPDATE
    | valkey_module::raw::REDISMODULE_CMD_KEY_INSERT
    | valkey_module::raw::REDISMODULE_CMD_KEY_DELETE;

impl<'c> Host<'c> {
    pub fn new(ctx: &'c Context, verb: &'static str) -> Self {
        let spare = SPARE.with(Cell::take).unwrap_or_default();
        Host {
            ctx,
            verb,
            names: Names::new(spare.recent, spare.held_names),
            reads: RefCell::new(spare.reads),
            targets: RefCell::new(spare.targets),
            effect: RefCell::new(spare.effect),
            held: RefCell::new(spare.held),
            spent: RefCell::new(spare.spent),
        }
    }

    fn host_error(&self, what: &str) -> Refusal {
        Refusal::Host(format!("{} {what}", self.verb))
    }

    /// A string made (or found), or the host's refusal when it could not be.
    fn made(&self, s: Option<Str>) -> Result<Str, Refusal> {
        s.ok_or_else(|| self.host_error("could not make a string"))
    }

    /// The server string for `bytes` (field names shared, recent keys and members reused).
    fn name(&self, bytes: &[u8]) -> Result<Str, Refusal> {
        self.made(self.names.get(bytes))
    }

    /// The server string for a key or member the command asks for again after many others (a
    /// batch's row keys: checked, then written after the whole batch's checks), held until the
    /// command ends (see `Names::hold`).
    pub fn hold(&self, bytes: &[u8]) -> Result<Str, Refusal> {
        self.made(self.names.hold(bytes))
    }

    /// [`Host::hold`] of a row the command leases (CLAIMS): its string kept for the settles
    /// to come (see `Names::hold_leased`).
    pub fn hold_leased(&self, bytes: &[u8]) -> Result<Str, Refusal> {
        self.made(self.names.hold_leased(bytes))
    }

    /// [`Host::hold`] of a row a recent claim may have leased (a batch's settle): its string
    /// reused when it is kept (see `Names::hold_again`).
    pub fn hold_again(&self, bytes: &[u8]) -> Result<Str, Refusal> {
        self.made(self.names.hold_again(bytes))
    }

    /// [`Host::hold`] of a string the server handed over (a peeked head).
    pub fn hold_str(&self, s: &Str) -> Result<(), Refusal> {
        self.names
            .hold_str(s)
            .ok_or_else(|| self.host_error("could not hold a string"))
    }

    /// `f` on the server string for `bytes`, borrowed for the call (see `Names::with`).
    fn with_name<T>(&self, bytes: &[u8], f: impl FnOnce(&Str) -> T) -> Result<T, Refusal> {
        self.names
            .with(bytes, f)
            .ok_or_else(|| self.host_error("could not make a string"))
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
    pub fn fence(&self) -> Fence<'_> {
        Fence {
            caller: Caller::of(self.ctx),
            host: self,
            writable: RefCell::new(Granted::none()),
        }
    }

    /// The members of a zset (or of nothing) with score ≤ `max`, lowest first, at most
    /// `limit`; WRONGTYPE when the key holds anything else.
    pub fn due(&self, key: &[u8], max: i64, limit: i64) -> Result<Vec<Str>, Refusal> {
        self.range(key, max as f64, usize::try_from(limit).unwrap_or(0))
    }

    /// The lowest `n` members of a zset, lowest first, as `n` ZPOPMINs would pop them; the key
    /// is opened as the pops' target (see `target`: a pop reads nothing a script's ZPOPMIN
    /// would count).
    pub fn heads(&self, key: &[u8], n: usize) -> Result<Vec<Str>, Refusal> {
        self.target(key, |k| match k.kind() {
            Kind::Empty => Ok(Vec::new()),
            Kind::Zset => Ok(k.zrange_to(f64::INFINITY, n, |m, _| m)),
            _ => Err(Refusal::WrongType),
        })?
    }

    /// The lowest score of a zset (schedule's next due time), `None` when it is empty;
    /// WRONGTYPE when the key holds anything else.
    pub fn first_score(&self, key: &[u8]) -> Result<Option<i64>, Refusal> {
        self.read(key, |k| match k.kind() {
            Kind::Empty => Ok(None),
            Kind::Zset => Ok(k.lowest().map(|(_, score)| score as i64)),
            _ => Err(Refusal::WrongType),
        })?
    }

    /// Every member of a zset (or of nothing) with its score, lowest first; WRONGTYPE when the
    /// key holds anything else. For the rate log, which holds at most `RATE_MAX` entries.
    pub fn scores(&self, key: &[u8]) -> Result<Vec<(Str, i64)>, Refusal> {
        self.read(key, |k| match k.kind() {
            Kind::Empty => Ok(Vec::new()),
            Kind::Zset => Ok(k.zrange_to(f64::INFINITY, usize::MAX, |m, score| (m, score as i64))),
            _ => Err(Refusal::WrongType),
        })?
    }

    /// Signal `key` ready for the clients blocked on it (BCLAIM), after this command's writes.
    /// Best effort by design: the writes are made, and a server without the call has no
    /// blocked client to wake.
    pub fn signal(&self, key: &[u8]) {
        if let Ok(name) = self.name(key) {
            ffi::signal_ready(self.ctx, &name);
        }
    }

    /// Block the caller on `keys` until one is signalled (`on_wake`) or `timeout_ms` passes
    /// (`on_timeout`; 0 = never). Nothing is written.
    pub fn block(
        &self,
        keys: &[&[u8]],
        timeout_ms: i64,
        on_wake: ffi::Callback,
        on_timeout: ffi::Callback,
    ) -> Result<(), Refusal> {
        let names = keys
            .iter()
            .map(|k| self.name(k))
            .collect::<Result<Vec<_>, _>>()?;
        if ffi::block_on_keys(self.ctx, &names, timeout_ms, on_wake, on_timeout) {
            Ok(())
        } else {
            Err(self.host_error("could not block the client"))
        }
    }

    fn range(&self, key: &[u8], max: f64, limit: usize) -> Result<Vec<Str>, Refusal> {
        self.read(key, |k| match k.kind() {
            Kind::Empty => Ok(Vec::new()),
            Kind::Zset => Ok(k.zrange_to(max, limit, |m, _| m)),
            _ => Err(Refusal::WrongType),
        })?
    }

    /// `f` on a read handle of `key` (or on its target handle when the command opened one).
    /// A key that exists keeps its handle until the first write (a verb that checks one set
    /// per pair or member opens it once); a missing key is looked up again each time, as a
    /// script's reads would.
    fn read<T>(&self, key: &[u8], f: impl FnOnce(&Key) -> T) -> Result<T, Refusal> {
        if let Some(k) = find(&self.targets.borrow(), key) {
            return Ok(f(k));
        }
        if let Some(k) = find(&self.reads.borrow(), key) {
            return Ok(f(k));
        }
        let k = Key::read(self.ctx, self.name(key)?)
            .ok_or_else(|| self.host_error("could not open a key"))?;
        let out = f(&k);
        if k.kind() != Kind::Empty {
            let mut reads = self.reads.borrow_mut();
            if reads.len() == KEPT_READS {
                reads.remove(0);
            }
            if reads.capacity() == 0 {
                reads.reserve_exact(KEPT_READS);
            }
            reads.push(k);
        }
        Ok(out)
    }

    /// `f` on the read-and-write handle of a key this command writes when its checks pass:
    /// opened once, checked through it, written through it (`write_run`). Only for a key the
    /// script reads with no command of its own (it only ZADDs, ZPOPMINs, HINCRBYs or XADDs
    /// it): a write open counts no keyspace hit or miss and fires no `keymiss`, as the
    /// script's write commands do not; a handle closed unwritten signals no change to WATCH
    /// (the module signals modified keys itself, after each write: `write_run`).
    fn target<T>(&self, key: &[u8], f: impl FnOnce(&Key) -> T) -> Result<T, Refusal> {
        if let Some(k) = find(&self.targets.borrow(), key) {
            return Ok(f(k));
        }
        // a read handle of the same key is not kept beside the write handle
        let read = position(&self.reads.borrow(), key);
        if let Some(at) = read {
            self.reads.borrow_mut().remove(at);
        }
        let k = Key::write(self.ctx, self.name(key)?)
            .ok_or_else(|| self.host_error("could not open a key"))?;
        let out = f(&k);
        self.targets.borrow_mut().push(k);
        Ok(out)
    }

    /// What `key` holds.
    pub fn kind(&self, key: &[u8]) -> Result<Kind, Refusal> {
        self.read(key, Key::kind)
    }

    /// A key the verb will ZADD/ZREM: a zset or nothing (checked on its target handle).
    pub fn expect_zset(&self, key: &[u8]) -> Result<(), Refusal> {
        match self.target(key, Key::kind)? {
            Kind::Empty | Kind::Zset => Ok(()),
            _ => Err(Refusal::WrongType),
        }
    }

    /// A key the verb will XADD to: a stream or nothing (checked on its target handle).
    pub fn expect_stream(&self, key: &[u8]) -> Result<(), Refusal> {
        match self.target(key, Key::kind)? {
            Kind::Empty | Kind::Stream => Ok(()),
            _ => Err(Refusal::WrongType),
        }
    }

    /// A key the verb will HSET: a hash or nothing (checked on its target handle).
    pub fn expect_hash(&self, key: &[u8]) -> Result<(), Refusal> {
        match self.target(key, Key::kind)? {
            Kind::Empty | Kind::Hash => Ok(()),
            _ => Err(Refusal::WrongType),
        }
    }

    /// SPUBLISH `message` on `channel`, after the writes (a message is no write: nothing is
    /// replicated).
    pub fn publish(&self, channel: &Str, message: &[u8]) -> Result<(), Refusal> {
        let message = self.name(message)?;
        if ffi::publish_shard(self.ctx, channel, &message) {
            Ok(())
        } else {
            Err(self.host_error("has no SPUBLISH"))
        }
    }

    /// Is `member` in the zset `key` (a zset or nothing, else WRONGTYPE)?
    pub fn in_zset(&self, key: &[u8], member: &[u8]) -> Result<bool, Refusal> {
        self.read(key, |k| self.has_member(k, member))?
    }

    /// [`Host::in_zset`] of a key the verb ZREMs `member` from when its checks pass, asked on
    /// the key's target handle: for a verb whose script checks with that ZREM, which counts no
    /// read (see `target`).
    pub fn in_zset_to_remove(&self, key: &[u8], member: &[u8]) -> Result<bool, Refusal> {
        self.target(key, |k| self.has_member(k, member))?
    }

    fn has_member(&self, k: &Key, member: &[u8]) -> Result<bool, Refusal> {
        match k.kind() {
            Kind::Empty => Ok(false),
            Kind::Zset => self.with_name(member, |m| k.zscore(m).is_some()),
            _ => Err(Refusal::WrongType),
        }
    }

    /// A hash's fields, in order: `None` when the key does not exist, WRONGTYPE when it is
    /// not a hash.
    pub fn hash(&self, key: &[u8], fields: &[&str]) -> Result<Option<Seen>, Refusal> {
        self.read(key, |k| match k.kind() {
            Kind::Empty => Ok(None),
            Kind::Hash => {
                let mut seen = Seen::new();
                for f in fields {
                    seen.0.push(self.hash_field(k, f)?);
                }
                Ok(Some(seen))
            }
            _ => Err(Refusal::WrongType),
        })?
    }

    /// A job's row, read as [`Host::hash`] reads it (the same answers, in `fields`' order), but
    /// the fields a row seldom has ([`crate::decide::SELDOM_FIELDS`]) looked up last, and not
    /// at all once the fields found are every field the row holds: a lookup of an absent field
    /// searches the whole row. The leased fields not asked for are counted first (an existence
    /// test each, no copy) when they can account for the rest. `fields` are distinct, at most
    /// 64.
    pub fn row(&self, key: &[u8], fields: &[&str]) -> Result<Option<Seen>, Refusal> {
        let plan = row_lookup(fields);
        self.read(key, |k| match k.kind() {
            Kind::Empty => Ok(None),
            Kind::Hash => {
                let get = |f: &str| self.hash_field(k, f);
                let mut seen = Seen::new();
                let mut found = 0;
                for (at, f) in fields.iter().enumerate() {
                    let value = match plan.seldom & 1 << at {
                        0 => get(f)?,
                        _ => None,
                    };
                    found += usize::from(value.is_some());
                    seen.0.push(value);
                }
                if plan.seldom == 0 {
                    return Ok(Some(seen));
                }
                let total = k.len();
                let mut left = plan.probes.count_ones() as usize;
                for (at, probe) in LEASED_FIELDS.iter().enumerate() {
                    if plan.probes & 1 << at == 0 {
                        continue;
                    }
                    if !probing_pays(total, found, left) {
                        break;
                    }
                    left -= 1;
                    let has = self.with_name(probe.as_bytes(), |f| k.hash_has(f))?;
                    found += usize::from(has.ok_or_else(|| self.unread())?);
                }
                for (at, f) in fields.iter().enumerate() {
                    if plan.seldom & 1 << at == 0 || found == total {
                        continue;
                    }
                    let value = get(f)?;
                    found += usize::from(value.is_some());
                    seen.0[at] = value;
                }
                Ok(Some(seen))
            }
            _ => Err(Refusal::WrongType),
        })?
    }

    /// One field of the hash `k` (a hash: checked by the caller).
    fn hash_field(&self, k: &Key, field: &str) -> Result<Option<Str>, Refusal> {
        self.with_name(field.as_bytes(), |f| k.hash_get(f))?
            .ok_or_else(|| self.unread())
    }

    fn unread(&self) -> Refusal {
        self.host_error("could not read a hash")
    }

    /// A counter's `count` (`metrics:<outcome>`), read on the target handle of the key the
    /// verb will HINCRBY: `None` when the key or the field is absent; WRONGTYPE when it is not
    /// a hash.
    pub fn counter(&self, key: &[u8]) -> Result<Option<Str>, Refusal> {
        let count = self.name(b"count")?;
        self.target(key, |k| match k.kind() {
            Kind::Empty => Ok(None),
            Kind::Hash => k
                .hash_get(&count)
                .ok_or_else(|| self.host_error("could not read a hash")),
            _ => Err(Refusal::WrongType),
        })?
    }

    /// Check 6, one write: made through a key handle, verified against its prediction, then
    /// replicated as its effect.
    pub fn write(&self, op: &Op<'_>) -> Result<(), Refusal> {
        self.apply(std::slice::from_ref(op))
    }

    /// Writes to one key, in order, through one key handle; each verified and notified as
    /// its own command. The effect replicated is the command itself, except for a run of
    /// several hash writes, which travels as one HSET of the values written (an increment
    /// as the value it produced).
    fn write_run(&self, run: &[Op<'_>]) -> Result<(), Refusal> {
        let Some(first) = run.first() else {
            return Ok(());
        };
        // no read handle outlives the first write (a write may change or delete what it
        // points at); the target handles are the writes' own
        self.reads.borrow_mut().clear();
        let fail = |op: &Op<'_>, what: &str| self.host_error(&format!("{} {what}", op.cmd));
        let key = first
            .args
            .first()
            .ok_or_else(|| fail(first, "has no key"))?;
        let at = position(&self.targets.borrow(), key);
        let at = match at {
            Some(at) => at,
            None => {
                let k = Key::write(self.ctx, self.name(key)?)
                    .ok_or_else(|| fail(first, "could not open its key"))?;
                let mut targets = self.targets.borrow_mut();
                targets.push(k);
                targets.len() - 1
            }
        };
        let targets = self.targets.borrow();
        let k = &targets[at];
        let merged = run.len() > 1;
        let mut effect = self.effect.take();
        // the effect's key: the handle's own name, one more reference
        effect.push(
            k.name_str()
                .retain()
                .ok_or_else(|| fail(first, "has no key"))?,
        );
        let mut name = Cmd::Hset;
        let mut outcome = Ok(());
        let mut done = 0;
        for op in run {
            // the op's arguments after the key, as strings, straight into the effect
            let start = effect.len();
            let made = op.args.iter().skip(1).try_for_each(|a| {
                effect.push(self.name(a)?);
                Ok(())
            });
            let produced = match made.and_then(|()| self.perform(k, op, &effect[start..])) {
                Ok(produced) => produced,
                Err(e) => {
                    // what the run already wrote is still replicated below
                    effect.truncate(start);
                    outcome = Err(e);
                    break;
                }
            };
            name = if merged { Cmd::Hset } else { op.replicated() };
            match (op.cmd, merged, produced) {
                // an increment among merged hash writes: its field and the value it produced
                (Cmd::Hincrby, true, Some(value)) => {
                    effect.truncate(start + 1);
                    effect.push(value);
                }
                // a pop travels as the removal of what it popped
                (Cmd::Zpopmin, _, Some(member)) => effect.push(member),
                // an append travels with the id it was given and its exact bound:
                // XADD key MAXLEN <n> <id> field value …
                (Cmd::Xadd, _, Some(id)) => {
                    let mut rest = effect.split_off(start).into_iter();
                    effect.push(self.name(b"MAXLEN")?);
                    effect.extend(rest.next());
                    effect.push(id);
                    effect.extend(rest);
                }
                _ => {}
            }
            done += 1;
        }
        if done > 0 {
            // WATCH and client tracking see the change (implicit signals are off: `target`)
            ffi::signal_modified(self.ctx, &effect[0]);
        }
        let replicated = done == 0 || self.replicate(name, &mut effect);
        effect.clear(); // the effect left unreplicated when nothing was written
        self.effect.replace(effect);
        if !replicated {
            return Err(fail(first, "could not be replicated"));
        }
        outcome
    }

    /// A write no key handle makes (HSETEX: a hash field's own expiry), run as the command
    /// itself (the server notifies and signals it) and replicated as the server propagates the
    /// command it ran (its deadline is absolute, so a replica and the AOF write the same), after
    /// any held effect on its key; verified against its prediction. Its arguments are made as
    /// strings once.
    fn write_call(&self, op: &Op<'_>) -> Result<(), Refusal> {
        // no read handle outlives a write (`write_run`)
        self.reads.borrow_mut().clear();
        let fail = |what: &str| self.host_error(&format!("{} {what}", op.cmd));
        let key = op.args.first().ok_or_else(|| fail("has no key"))?;
        if !self.release_touching(key) {
            return Err(fail("could not be replicated"));
        }
        let mut args = self.effect.take();
        let written = op
            .args
            .iter()
            .try_for_each(|a| {
                args.push(self.name(a)?);
                Ok(())
            })
            .and_then(|()| match ffi::call_int(self.ctx, op.cmd.name(), &args) {
                ffi::Called::Int(got) => Ok(got),
                ffi::Called::Refused(e) => Err(fail(&format!("was refused: {e}"))),
                ffi::Called::Other => Err(fail("answered no integer")),
            })
            .and_then(|got| match op.expect {
                Expect::Int(want) if want == got => Ok(()),
                Expect::AnyInt => Ok(()),
                _ => Err(fail(&format!("answered {got}, not {:?}", op.expect))),
            });
        args.clear();
        self.effect.replace(args);
        written
    }

    /// Replicate now the held effect that writes `key`, if one does (at most one: `replicate`
    /// merges into it or sends it first), so that a write propagated now follows it.
    fn release_touching(&self, key: &[u8]) -> bool {
        let at = self.held.borrow().iter().position(|e| touches(e, key));
        match at {
            Some(at) => {
                let effect = self.held.borrow_mut().remove(at);
                self.send(effect)
            }
            None => true,
        }
    }

    /// Replicate one effect (`effect`, its key first; emptied), or hold it back: a ZADD or
    /// ZREM joins the one held for its key when that is the same command, a DEL joins the one
    /// DEL held (whatever its keys), else each is held itself. Whatever else is held that
    /// writes the key is replicated first, so every key sees its effects in the order they
    /// were made; effects on different keys commute (inside the command's one MULTI/EXEC).
    /// `apply` replicates the held ones at its end (`release`).
    fn replicate(&self, cmd: Cmd, effect: &mut Vec<Str>) -> bool {
        let mut held = self.held.borrow_mut();
        let mut replicated = true;
        // a DEL joins the held DEL below whether or not it names the key already (`DEL k k`
        // deletes k once), so only the other effects are looked through for its key
        let writes_key = |e: &Effect| match cmd {
            Cmd::Del => e.cmd != Cmd::Del && e.args[0][..] == effect[0][..],
            _ => touches(e, &effect[0]),
        };
        if let Some(i) = held.iter().position(writes_key) {
            if held[i].cmd == cmd && merges(cmd) {
                held[i].args.extend(effect.drain(1..));
                effect.clear();
                return true;
            }
            replicated &= self.send(held.remove(i));
        }
        if cmd == Cmd::Del {
            if let Some(del) = held.iter_mut().find(|e| e.cmd == Cmd::Del) {
                del.args.append(effect);
                return replicated;
            }
        }
        if merges(cmd) {
            let spent = self.spent.borrow_mut().pop().unwrap_or_default();
            let args = std::mem::replace(effect, spent);
            held.push(Effect { cmd, args });
            return replicated;
        }
        replicated &= ffi::replicate(self.ctx, cmd.name(), effect);
        effect.clear();
        replicated
    }

    /// `RM_Replicate` of one effect; its emptied vector kept for the next held one.
    fn send(&self, mut effect: Effect) -> bool {
        let replicated = ffi::replicate(self.ctx, effect.cmd.name(), &effect.args);
        effect.args.clear();
        self.spent.borrow_mut().push(effect.args);
        replicated
    }

    /// Replicate every held effect, in the order each was first held.
    fn release(&self) -> Result<(), Refusal> {
        let mut held = self.held.take();
        let mut replicated = true;
        for effect in held.drain(..) {
            replicated &= self.send(effect);
        }
        self.held.replace(held);
        if replicated {
            Ok(())
        } else {
            Err(self.host_error("could not replicate its effects"))
        }
    }

    /// One write on an open key handle: made, verified against its prediction, notified.
    /// Also answers what the effect needs beyond the op's own arguments: the value an
    /// increment produced (for a merged HSET), or the member a pop removed.
    fn perform(&self, k: &Key, op: &Op<'_>, rest: &[Str]) -> Result<Option<Str>, Refusal> {
        let fail = |what: &str| self.host_error(&format!("{} {what}", op.cmd));
        let score = |raw: &[u8]| {
            string2ll(raw)
                .map(|n| n as f64)
                .ok_or_else(|| fail("has a bad score"))
        };
        let mut produced = None;
        let (reply, class, event): (Reply, c_int, &CStr) = match op.cmd {
            Cmd::Hset => {
                let new = k.hash_set_all(rest).ok_or_else(|| fail("was refused"))?;
                (Reply::Int(new), NOTIFY_HASH, c"hset")
            }
            Cmd::Hincrby => {
                let [field, by] = rest else {
                    return Err(fail("has bad arguments"));
                };
                let by = string2ll(by).ok_or_else(|| fail("has a bad increment"))?;
                let stored = k.hash_get(field).flatten();
                let next = incr(stored.as_deref(), by).map_err(&fail)?;
                let value = self.name(&num(next))?;
                k.hash_set_all(&[field, &value])
                    .ok_or_else(|| fail("was refused"))?;
                produced = Some(value);
                (Reply::Int(next), NOTIFY_HASH, c"hincrby")
            }
            Cmd::Zadd => {
                let mut added = 0;
                for pair in rest.chunks(2) {
                    let [s, member] = pair else {
                        return Err(fail("has an odd member list"));
                    };
                    added += i64::from(
                        k.zadd(score(s)?, member)
                            .ok_or_else(|| fail("was refused"))?,
                    );
                }
                (Reply::Int(added), NOTIFY_ZSET, c"zadd")
            }
            Cmd::Zrem => {
                let mut removed = 0;
                for member in rest {
                    removed += i64::from(k.zrem(member).ok_or_else(|| fail("was refused"))?);
                }
                (Reply::Int(removed), NOTIFY_ZSET, c"zrem")
            }
            Cmd::Zpopmin => {
                // the head this command peeked (a plan pops its peeked heads in their order,
                // nothing else written between): removed by its bytes, its string the one the
                // peek made (held), not made again by reading the head; it must be there
                let Expect::Popped(head) = op.expect else {
                    return Err(fail("has no peeked head"));
                };
                let member = self.name(head)?;
                if k.zrem(&member) != Some(true) {
                    return Err(fail("found no peeked head to pop"));
                }
                // the member is what the verification compares (ZPOPMIN's score is no part
                // of the move), then the effect's
                (Reply::Popped(member), NOTIFY_ZSET, c"zpopmin")
            }
            Cmd::Del => {
                let existed = k.delete().ok_or_else(|| fail("was refused"))?;
                (Reply::Int(i64::from(existed)), NOTIFY_GENERIC, c"del")
            }
            Cmd::Xadd => {
                let Some((maxlen, fields)) = rest.split_first() else {
                    return Err(fail("has bad arguments"));
                };
                let maxlen = string2ll(maxlen).ok_or_else(|| fail("has a bad bound"))?;
                let (ms, seq) = k
                    .stream_add(fields, maxlen)
                    .ok_or_else(|| fail("was refused"))?;
                let id = format!("{ms}-{seq}").into_bytes();
                produced = Some(self.name(&id)?);
                (Reply::Bulk(id), NOTIFY_STREAM, c"xadd")
            }
            Cmd::Pexpireat => {
                let [at] = rest else {
                    return Err(fail("has bad arguments"));
                };
                let at = string2ll(at).ok_or_else(|| fail("has a bad time"))?;
                let set = k.expire_at(at).ok_or_else(|| fail("was refused"))?;
                (Reply::Int(i64::from(set)), NOTIFY_GENERIC, c"expire")
            }
            // a command, not a key handle's write (`write_call`)
            Cmd::Hsetex => return Err(fail("has no key handle write")),
        };
        let ok = match (&op.expect, &reply) {
            (Expect::Int(want), Reply::Int(got)) => want == got,
            (Expect::AnyInt, Reply::Int(_)) => true,
            (Expect::AnyId, Reply::Bulk(_)) => true,
            (Expect::Popped(id), Reply::Popped(member)) => &member[..] == *id,
            _ => false,
        };
        if !ok {
            return Err(fail(&format!("answered {reply:?}, not {:?}", op.expect)));
        }
        k.notify(class, event);
        if k.kind() == Kind::Empty && class != NOTIFY_GENERIC {
            k.notify(NOTIFY_GENERIC, c"del");
        }
        if let Reply::Popped(member) = reply {
            produced = Some(member);
        }
        Ok(produced)
    }

    /// Every planned write, in order; consecutive hash writes to one key share a key
    /// handle and one replicated HSET, and the ZADDs (or ZREMs, pops) of one key travel as
    /// one (`replicate`). A failed write ends the plan; what it already wrote is replicated.
    /// A planted build alters the plan here, and only here (`plant`, the parity instrument's
    /// defects): no verb body knows of plants.
    pub fn apply(&self, plan: &[Op<'_>]) -> Result<(), Refusal> {
        #[cfg(feature = "planted")]
        let planted = crate::plant::alter(self.verb, plan, self.now_ms()?);
        #[cfg(feature = "planted")]
        let plan = planted.as_deref().unwrap_or(plan);
        let written = self.write_plan(plan);
        let released = self.release();
        written.and(released)
    }

    fn write_plan(&self, plan: &[Op<'_>]) -> Result<(), Refusal> {
        let mut rest = plan;
        while let Some(first) = rest.first() {
            if first.cmd == Cmd::Hsetex {
                self.write_call(first)?;
                rest = &rest[1..];
                continue;
            }
            let len = if first.is_hash_write() {
                rest.iter()
                    .take_while(|o| o.is_hash_write() && o.args.first() == first.args.first())
                    .count()
            } else {
                1
            };
            let (run, after) = rest.split_at(len.max(1));
            self.write_run(run)?;
            rest = after;
        }
        Ok(())
    }
}

/// Where the handle of `key` is among `handles` (compared by [`ffi::key_tag`] first).
fn position(handles: &[Key], key: &[u8]) -> Option<usize> {
    let tag = ffi::key_tag(key);
    handles.iter().position(|k| k.is(key, tag))
}

/// The handle of `key` among `handles`.
fn find<'k>(handles: &'k [Key], key: &[u8]) -> Option<&'k Key> {
    position(handles, key).map(|at| &handles[at])
}

/// The caller's ACL, checked on derived keys at first access (SPEC §5 check 4).
pub struct Fence<'h> {
    caller: Caller,
    host: &'h Host<'h>,
    /// The last key [`Fence::read_to_write`] found writable as well (its bytes, compared
    /// exactly): its `write` check is answered without asking the server again.
    writable: RefCell<Granted>,
}

/// A key's bytes, kept when they fit (a row key does); `len` 0: none.
struct Granted {
    bytes: [u8; GRANTED_MAX],
    len: usize,
}

/// The longest key whose write permission a fence remembers (a job's row key: the queue's name
/// and the id, most often well under this).
const GRANTED_MAX: usize = 160;

impl Granted {
    fn none() -> Granted {
        Granted {
            bytes: [0; GRANTED_MAX],
            len: 0,
        }
    }

    fn is(&self, key: &[u8]) -> bool {
        self.len > 0 && self.bytes[..self.len] == *key
    }
}

impl Fence<'_> {
    /// Does the caller hold `perms` on `key`, else the refusal naming `what` it lacks?
    fn ask(&self, key: &[u8], perms: u32, what: &str) -> Result<(), Refusal> {
        if self.host.with_name(key, |k| self.caller.allows(k, perms))? {
            return Ok(());
        }
        Err(Refusal::NoPerm(format!(
            "{} has no {what} permission on the derived key '{}'",
            self.host.verb,
            printable(key)
        )))
    }

    pub fn read(&self, key: &[u8]) -> Result<(), Refusal> {
        self.ask(key, READ_PERMS, "read")
    }

    pub fn write(&self, key: &[u8]) -> Result<(), Refusal> {
        if self.writable.borrow().is(key) {
            return Ok(());
        }
        self.ask(key, WRITE_PERMS, "write")
    }

    /// [`Fence::read`] of a key the verb checks for writing later in the same command (a job's
    /// row): read and write permission asked in one call; when both are held, the later
    /// [`Fence::write`] of this key is answered without asking again (a user's permissions do
    /// not change within a command). When they are not both held (in one ACL selector's
    /// pattern), the read is asked alone and the write later, as before: the same refusals, in
    /// the same order.
    pub fn read_to_write(&self, key: &[u8]) -> Result<(), Refusal> {
        let both = key.len() <= GRANTED_MAX
            && self
                .host
                .with_name(key, |k| self.caller.allows(k, READ_PERMS | WRITE_PERMS))?;
        if !both {
            return self.read(key);
        }
        let mut granted = self.writable.borrow_mut();
        granted.bytes[..key.len()].copy_from_slice(key);
        granted.len = key.len();
        Ok(())
    }

    /// A derived channel (the outcome channel of a job) as the server string it is published
    /// with, when the caller may publish on it. Made once, here, and kept by the caller until
    /// the message: not among the recent names, which a batch's hundred channels would push
    /// out (each made twice) along with the queue's keys.
    pub fn publishable(&self, channel: &[u8]) -> Result<Option<Str>, Refusal> {
        let channel =
            Str::new(channel).ok_or_else(|| self.host.host_error("could not make a string"))?;
        Ok(self.caller.allows_channel(&channel).then_some(channel))
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
