//! Pure deciders: Valkey's integer rules, the FAIL budget, the sweep verdict and its write
//! plan. Nothing here calls the server; the verbs read, ask these, then write.

use std::borrow::Cow;
use std::ffi::CStr;
use std::fmt;

use crate::errors::{NOT_INTEGER, OVERFLOW};
use crate::grammar::{Keyspace, EVENTS_MAX};
use crate::kept::Shelf;
use crate::state::State;

/// Valkey's `string2ll`: an optional `-`, then no leading zero (except `0` itself), at most
/// 20 characters, within i64. Hash values HINCRBY accepts are exactly these.
pub fn string2ll(raw: &[u8]) -> Option<i64> {
    if raw.is_empty() || raw.len() > 20 {
        return None;
    }
    if raw == b"0" {
        return Some(0);
    }
    let (negative, digits) = match raw.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, raw),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // accumulate negatively so i64::MIN parses
    let mut acc: i64 = 0;
    for &d in digits {
        acc = acc.checked_mul(10)?.checked_sub(i64::from(d - b'0'))?;
    }
    if negative {
        Some(acc)
    } else {
        acc.checked_neg()
    }
}

/// What `HINCRBY <key> <field> 1` replies, decided before any write: a missing field starts
/// at 0; a non-integer or an overflow is the reply HINCRBY would give (the `EMQ` texts).
pub fn next_attempt(stored: Option<&[u8]>) -> Result<i64, &'static str> {
    incr(stored, 1)
}

/// `HINCRBY` by `by`, predicted.
pub fn incr(stored: Option<&[u8]>, by: i64) -> Result<i64, &'static str> {
    let old = match stored {
        None => 0,
        Some(raw) => string2ll(raw).ok_or(NOT_INTEGER)?,
    };
    old.checked_add(by).ok_or(OVERFLOW)
}

/// A row's pending score: its `priority`, 0 when absent; a ZADD would refuse anything else.
pub fn priority(stored: Option<&[u8]>) -> Result<i64, &'static str> {
    match stored {
        None => Ok(0),
        Some(raw) => string2ll(raw).ok_or(NOT_INTEGER),
    }
}

/// FAIL's budget decision (native: capped on `failures`, SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Retry at once: back to pending.
    Pending,
    /// Retry after the backoff: to schedule.
    Scheduled,
    /// Budget spent: dead-lettered.
    Dead,
}

impl Budget {
    /// The state written and the bulk reply.
    pub fn state(self) -> &'static [u8] {
        match self {
            Budget::Pending => State::Pending.field(),
            Budget::Scheduled => State::Scheduled.field(),
            Budget::Dead => State::Dead.field(),
        }
    }
}

/// `failures' = failures + 1` (HINCRBY rules); dead when `failures' ≥ max_attempts`; else
/// pending when `backoff_ms` is 0, scheduled otherwise. Returns `failures'` with the verdict.
pub fn fail_budget(
    failures: Option<&[u8]>,
    max_attempts: i64,
    backoff_ms: i64,
) -> Result<(i64, Budget), &'static str> {
    let next = next_attempt(failures)?;
    let verdict = if next >= max_attempts {
        Budget::Dead
    } else if backoff_ms == 0 {
        Budget::Pending
    } else {
        Budget::Scheduled
    };
    Ok((next, verdict))
}

/// REMOVE's check: the state a removable row is in (pending, scheduled or dead), else the
/// refusal text. An active job has a holder: it is cancelled, not removed.
pub fn removable(verb: &str, state: Option<&[u8]>) -> Result<State, String> {
    let found = State::ALL.into_iter().find(|s| Some(s.field()) == state);
    match found {
        Some(State::Active) => Err(format!("{verb} row is active: cancel it instead")),
        Some(s) => Ok(s),
        None => Err(match state {
            Some(other) => format!(
                "{verb} row is {}, not pending, scheduled or dead",
                crate::errors::printable(other)
            ),
            None => format!("{verb} row has no state, not pending, scheduled or dead"),
        }),
    }
}

/// ENQUEUE.UNIQUE's verdict (docs/spec.md §14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// No row and no unique marker: the job is made.
    Create,
    /// The id has a row that stays as it is.
    Exists,
    /// `replace` and the row waits (pending or scheduled): its payload (and due time) change.
    Replace(State),
    /// No row, but the id completed within its unique window.
    Unique,
}

impl Admission {
    /// The verb's reply.
    pub fn reply(self) -> &'static [u8] {
        match self {
            Admission::Create => b"created",
            Admission::Exists => b"exists",
            Admission::Replace(_) => b"replaced",
            Admission::Unique => b"unique",
        }
    }
}

/// ENQUEUE.UNIQUE's decision from the row's state (`None`: no row), `replace`, and whether
/// the unique marker is present (read only when there is no row). A replaced row must have a
/// state: a row without one is refused, like REMOVE refuses it.
pub fn admission(
    verb: &str,
    row: Option<Option<&[u8]>>,
    replace: bool,
    marked: bool,
) -> Result<Admission, String> {
    let Some(state) = row else {
        return Ok(if marked {
            Admission::Unique
        } else {
            Admission::Create
        });
    };
    if !replace {
        return Ok(Admission::Exists);
    }
    match State::ALL.into_iter().find(|s| Some(s.field()) == state) {
        Some(s @ (State::Pending | State::Scheduled)) => Ok(Admission::Replace(s)),
        Some(_) => Ok(Admission::Exists),
        None => Err(match state {
            Some(other) => format!(
                "{verb} row is {}, not pending, scheduled, active or dead",
                crate::errors::printable(other)
            ),
            None => format!("{verb} row has no state"),
        }),
    }
}

/// PURGE's and DRAIN's verdict on one member of the set they clear: its row is deleted when
/// its `state` names that set; a ghost (no row) or a row whose state names another set only
/// leaves the set, so a job that drifted into two sets keeps its row.
pub fn deletes_row(state: Option<Option<&[u8]>>, want: State) -> bool {
    matches!(state, Some(Some(s)) if s == want.field())
}

/// The fields a job's row seldom has: a lane job's `group`, a flow child's `parent`, a unique
/// window's `unique`. A token verb asks for each at every check, and a lookup of an absent
/// field searches the whole row.
pub const SELDOM_FIELDS: [&str; 3] = ["group", "parent", "unique"];

/// The fields a leased row has: ENQUEUE's `state`, `payload`, `attempts` and `created`, and the
/// claim's `lease_epoch` and `started`.
pub const LEASED_FIELDS: [&str; 6] = [
    "state",
    "payload",
    "attempts",
    "created",
    "lease_epoch",
    "started",
];

/// How a row's fields are looked up (`Host::row`): `seldom`, the places (bits) of the asked
/// fields a row seldom has, looked up last; `probes`, the leased fields not asked for (bits of
/// [`LEASED_FIELDS`]), whose existence may be counted so that the seldom ones need no lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowLookup {
    pub seldom: u64,
    pub probes: u8,
}

/// The lookup of `fields` (at most 64): which are seldom there, and which leased fields could be
/// counted besides them (none when no seldom field is asked for: nothing to spare).
pub fn row_lookup(fields: &[&str]) -> RowLookup {
    let seldom = fields
        .iter()
        .enumerate()
        .filter(|(_, f)| SELDOM_FIELDS.contains(f))
        .fold(0u64, |bits, (at, _)| bits | 1 << at);
    let probes = match seldom {
        0 => 0,
        _ => LEASED_FIELDS
            .iter()
            .enumerate()
            .filter(|(_, f)| !fields.contains(f))
            .fold(0u8, |bits, (at, _)| bits | 1 << at),
    };
    RowLookup { seldom, probes }
}

/// Is a row of `total` fields, `found` of them found so far, worth `left` more existence tests?
/// Only when they can account for every field it has: then the fields not found are absent.
pub fn probing_pays(total: usize, found: usize, left: usize) -> bool {
    found < total && total <= found + left
}

/// The queue's event switch, `meta events`: absent or ≤ 0 = off; else the stream's bound
/// (MAXLEN, exact), at most EVENTS_MAX (a larger one is read as that: the stream stays bounded
/// whatever a raw write put there). Anything but an integer is refused like a counter.
pub fn events_bound(stored: Option<&[u8]>) -> Result<Option<i64>, &'static str> {
    match stored {
        None => Ok(None),
        Some(raw) => {
            let n = string2ll(raw).ok_or(NOT_INTEGER)?;
            Ok((n > 0).then_some(n.min(EVENTS_MAX)))
        }
    }
}

/// Where a queue keeps its completed records (docs/spec.md §12): a field of its hash `done`, or
/// the key `done:<id>` of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The job's field of `done`: its packed record ([`pack_record`]), its own expiry.
    Fields,
    /// The key `done:<id>` (a hash of the record's fields), for a rolling upgrade's readers.
    Record,
}

/// The layout of a queue whose `meta results` is `stored`: `Record` when it is exactly
/// `record`, else (absent or anything else) `Fields`. trafikey's nodes keep hash-field expiry
/// (Valkey 9.1), the rule's other half, always.
pub fn record_layout(stored: Option<&[u8]>) -> Layout {
    match stored {
        Some(b"record") => Layout::Record,
        _ => Layout::Fields,
    }
}

/// A completed record as one field's value, added to `into` (a batch packs its records one
/// after the other in one buffer): `<attempts>,<finished>,<created>,<started>,` then the
/// result's bytes (everything after the fourth comma); `created` and `started` empty when the
/// row had none.
pub fn pack_record(
    into: &mut Vec<u8>,
    attempts: &[u8],
    finished: &[u8],
    (created, started): (Option<&[u8]>, Option<&[u8]>),
    result: &[u8],
) {
    let (created, started) = (created.unwrap_or_default(), started.unwrap_or_default());
    into.reserve(
        attempts.len() + finished.len() + created.len() + started.len() + result.len() + 4,
    );
    for part in [attempts, finished, created, started] {
        into.extend_from_slice(part);
        into.push(b',');
    }
    into.extend_from_slice(result);
}

/// The most starts a queue's rate limit may allow per window: the sliding log holds at most
/// this many entries (docs/spec.md §13).
pub const RATE_MAX: i64 = 10_000;
/// The longest rate window, ms (a day).
pub const RATE_WINDOW_MAX: i64 = 86_400_000;
/// `EMQ` text: `meta rate_limit` is on but it, or `meta rate_window`, is out of range.
pub const BAD_RATE: &str =
    "rate limit must be 1 to 10000 starts per rate_window of 1 to 86400000 ms";

/// A queue's rate limit: at most `limit` starts in any `window` ms (docs/spec.md §13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub limit: i64,
    pub window: i64,
}

/// The queue's rate limit from `meta rate_limit` and `meta rate_window`: `rate_limit` absent
/// or ≤ 0 is off (the window is not read); anything but integers is refused like a counter,
/// and a limit over [`RATE_MAX`] or a window outside 1..=[`RATE_WINDOW_MAX`] (absent
/// included) as [`BAD_RATE`].
pub fn rate_of(limit: Option<&[u8]>, window: Option<&[u8]>) -> Result<Option<Rate>, &'static str> {
    let Some(raw) = limit else {
        return Ok(None);
    };
    let limit = string2ll(raw).ok_or(NOT_INTEGER)?;
    if limit <= 0 {
        return Ok(None);
    }
    let window = string2ll(window.ok_or(BAD_RATE)?).ok_or(NOT_INTEGER)?;
    if limit > RATE_MAX || !(1..=RATE_WINDOW_MAX).contains(&window) {
        return Err(BAD_RATE);
    }
    Ok(Some(Rate { limit, window }))
}

/// The sliding log's verdict at `now`: `in_window` are the scores (start times) of the log's
/// entries later than `now - window`, lowest first. `None`: a start may happen now; else
/// the ms until one may (the entry whose leaving brings the count under the limit leaves the
/// window then), at least 1.
pub fn rate_wait(rate: Rate, in_window: &[i64], now: i64) -> Option<i64> {
    let over = (in_window.len() as i64).checked_sub(rate.limit)?;
    let frees = in_window.get(usize::try_from(over).ok()?)?;
    Some((frees + rate.window - now).max(1))
}

/// One swept member's verdict (SPEC §5, STALLED.CHECK).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swept {
    /// No row: removed from active, in no list.
    Ghost,
    /// Restart-caused: back to pending, `stalled` unchanged.
    Exempt,
    /// Counted, below the threshold: back to pending with `stalled` = the value.
    Recover(i64),
    /// Counted, at or over the threshold: dead with `stalled` = the value.
    Die(i64),
}

/// What the sweep read of one member's row.
#[derive(Debug, Clone, Default)]
pub struct MemberSeen<'a> {
    /// The row's type: `None` = no row.
    pub row: RowKind,
    pub group: bool,
    pub lease_epoch: Option<&'a [u8]>,
    pub stalled: Option<&'a [u8]>,
}

/// A key's kind, as far as the verbs care.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RowKind {
    #[default]
    None,
    Hash,
    Other,
}

/// Why the whole sweep refuses (before any write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepRefusal {
    WrongType,
    Lane,
    Counter(&'static str),
}

/// Pure: one member's verdict. A ghost never reads `group`; an exempt member never reads
/// `stalled` (a non-integer `stalled` on an exempt row does not refuse).
pub fn decide_member(
    run_id: &[u8],
    max_stalled: i64,
    seen: &MemberSeen<'_>,
) -> Result<Swept, SweepRefusal> {
    match seen.row {
        RowKind::None => return Ok(Swept::Ghost),
        RowKind::Other => return Err(SweepRefusal::WrongType),
        RowKind::Hash => {}
    }
    if seen.group {
        return Err(SweepRefusal::Lane);
    }
    if crate::epoch::exempt(seen.lease_epoch, run_id) {
        return Ok(Swept::Exempt);
    }
    match next_attempt(seen.stalled) {
        Err(text) => Err(SweepRefusal::Counter(text)),
        Ok(st) if st >= max_stalled => Ok(Swept::Die(st)),
        Ok(st) => Ok(Swept::Recover(st)),
    }
}

/// The events one swept member writes when its queue's events are on: a counted expiry is a
/// `stalled`, then `recovered` or `dead` (error `stalled`); a restart-caused one only
/// `recovered`; a ghost none.
pub fn sweep_events(verdict: Swept) -> &'static [(&'static [u8], &'static [&'static [u8]])] {
    const PENDING: &[&[u8]] = &[b"state", State::Pending.field()];
    const DEAD: &[&[u8]] = &[b"error", b"stalled", b"state", State::Dead.field()];
    match verdict {
        Swept::Ghost => &[],
        Swept::Exempt => &[(b"recovered", PENDING)],
        Swept::Recover(_) => &[(b"stalled", &[]), (b"recovered", PENDING)],
        Swept::Die(_) => &[(b"stalled", &[]), (b"dead", DEAD)],
    }
}

/// What a write must answer to be the one predicted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect<'a> {
    /// Exactly this integer.
    Int(i64),
    /// Any integer (a count whose value is not part of the move).
    AnyInt,
    /// ZPOPMIN's `[member, score]` with this member.
    Popped(&'a [u8]),
    /// XADD's reply: the id the entry was given, whatever it is.
    AnyId,
}

/// The commands a plan writes with, each on one key through a key handle (an enum, not the
/// command's text: the host branches on it several times a write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    Hset,
    Hincrby,
    Zadd,
    Zrem,
    Zpopmin,
    Del,
    Xadd,
    Pexpireat,
    /// `HSETEX key PXAT <ms> FIELDS n f v …`: hash fields with their own expiry. No key handle
    /// writes a field's expiry, so the host runs it as a command (`Host::write_call`).
    Hsetex,
}

impl Cmd {
    /// Its name, NUL-terminated for `RM_Replicate`.
    pub fn name(self) -> &'static CStr {
        match self {
            Cmd::Hset => c"HSET",
            Cmd::Hincrby => c"HINCRBY",
            Cmd::Zadd => c"ZADD",
            Cmd::Zrem => c"ZREM",
            Cmd::Zpopmin => c"ZPOPMIN",
            Cmd::Del => c"DEL",
            Cmd::Xadd => c"XADD",
            Cmd::Pexpireat => c"PEXPIREAT",
            Cmd::Hsetex => c"HSETEX",
        }
    }
}

impl fmt::Display for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name().to_str().unwrap_or("?"))
    }
}

/// One planned write: the command, its arguments, the reply it must give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op<'a> {
    pub cmd: Cmd,
    /// The key, then the command's arguments; borrowed where the verb holds them.
    pub args: Args<'a>,
    pub expect: Expect<'a>,
}

/// A batch's plan is hundreds of ops (a 100-job CLAIMS' is 301, 72 KB): its vector is kept
/// from one command to the next ([`spare_plan`], [`recycle_plan`]) rather than allocated and
/// freed in each, as glibc's malloc (the server's) consolidates its free lists at each free of
/// 64 KB or more.
const KEPT_PLAN_MIN: usize = 16;

thread_local! {
    // `'static`, as a thread-local must be: a plan's ops borrow for less, so its vector is
    // relabelled on the way out and back in (`relabel`), holding no op meanwhile
    static SPARE_PLAN: Shelf<Op<'static>> = const { Shelf::new(KEPT_PLAN_MIN..=usize::MAX) };
}

/// An empty plan with room for `n` ops: the vector the last batch recycled, when there is one.
/// Hand it back with [`recycle_plan`].
pub fn spare_plan<'a>(n: usize) -> Vec<Op<'a>> {
    let mut plan = relabel(SPARE_PLAN.with(Shelf::take));
    plan.reserve(n);
    plan
}

/// Keep `plan`'s vector, emptied, for the next batch's [`spare_plan`] (a small one goes).
pub fn recycle_plan(plan: Vec<Op<'_>>) {
    SPARE_PLAN.with(|kept| kept.put(relabel(plan)));
}

/// An empty plan's vector under another lifetime, its allocation kept: a collect in place
/// (`Vec`'s `IntoIter` into a `Vec` of a type of the same size), which moves no op, as there
/// is none.
fn relabel<'b>(mut plan: Vec<Op<'_>>) -> Vec<Op<'b>> {
    plan.clear();
    plan.into_iter().map_while(|_| None).collect()
}

/// How many borrowed arguments an op holds without an allocation (a new row's HSET has 11).
const FEW_ARGS: usize = 12;

/// An op's arguments: a few borrowed ones in place (the lifecycle's writes: a plan allocates
/// nothing per op), or any number, borrowed or owned.
#[derive(Debug, Clone)]
pub enum Args<'a> {
    Few([&'a [u8]; FEW_ARGS], usize),
    Many(Vec<Cow<'a, [u8]>>),
}

impl<'a> Args<'a> {
    pub fn len(&self) -> usize {
        match self {
            Args::Few(_, len) => *len,
            Args::Many(args) => args.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, i: usize) -> Option<&[u8]> {
        match self {
            Args::Few(args, len) => args[..*len].get(i).copied(),
            Args::Many(args) => args.get(i).map(|a| &a[..]),
        }
    }

    pub fn first(&self) -> Option<&[u8]> {
        self.get(0)
    }

    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let (few, many): (&[&[u8]], &[Cow<'a, [u8]>]) = match self {
            Args::Few(args, len) => (&args[..*len], &[]),
            Args::Many(args) => (&[], args),
        };
        few.iter().copied().chain(many.iter().map(|a| &a[..]))
    }
}

impl PartialEq for Args<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Args<'_> {}

impl Op<'_> {
    /// HSET or HINCRBY: writes that can travel merged as one HSET of the values written.
    pub fn is_hash_write(&self) -> bool {
        matches!(self.cmd, Cmd::Hset | Cmd::Hincrby)
    }

    /// The command its effect is replicated as (a pop as the removal of what it popped).
    pub fn replicated(&self) -> Cmd {
        match self.cmd {
            Cmd::Zpopmin => Cmd::Zrem,
            cmd => cmd,
        }
    }
}

pub fn op<'a>(cmd: Cmd, args: &[&'a [u8]], expect: Expect<'a>) -> Op<'a> {
    let args = if args.len() <= FEW_ARGS {
        let mut few: [&[u8]; FEW_ARGS] = [&[]; FEW_ARGS];
        few[..args.len()].copy_from_slice(args);
        Args::Few(few, args.len())
    } else {
        Args::Many(args.iter().map(|a| Cow::Borrowed(*a)).collect())
    };
    Op { cmd, args, expect }
}

/// An op over arguments the plan owns (batched members, numbers it formatted).
pub fn owned_op(cmd: Cmd, args: Vec<Vec<u8>>, expect: Expect<'static>) -> Op<'static> {
    Op {
        cmd,
        args: Args::Many(args.into_iter().map(Cow::Owned).collect()),
        expect,
    }
}

/// The HSET of a new row (SPEC §1): the row key, `state`, `payload`, `attempts 0`, `created`,
/// `priority` (its text `prio`) only when above 0, and `unique` (ENQUEUE.UNIQUE's window, its
/// text) when given; each field new. ENQUEUE, ENQUEUE.UNIQUE and SCHEDULE admit a row alike.
/// Its arguments are gathered on the stack: ENQUEUE's row is written with no allocation.
pub fn new_row<'a>(
    row: &'a [u8],
    state: &'static [u8],
    payload: &'a [u8],
    created: &'a [u8],
    (priority, prio): (i64, &'a [u8]),
    unique: Option<&'a [u8]>,
) -> Op<'a> {
    let mut fields: [&[u8]; 13] = [&[]; 13];
    fields[..9].copy_from_slice(&[
        row,
        b"state",
        state,
        b"payload",
        payload,
        b"attempts",
        b"0",
        b"created",
        created,
    ]);
    let mut len = 9;
    if priority > 0 {
        fields[len..len + 2].copy_from_slice(&[b"priority", prio]);
        len += 2;
    }
    if let Some(window) = unique {
        fields[len..len + 2].copy_from_slice(&[b"unique", window]);
        len += 2;
    }
    op(Cmd::Hset, &fields[..len], Expect::Int((len as i64 - 1) / 2))
}

/// Integer text for a score or a counter, formatted on the stack (a verb makes several per
/// command: no allocation for each).
pub fn num(n: i64) -> Num {
    let mut buf = [0u8; NUM_MAX];
    let mut at = NUM_MAX;
    let mut rest = n.unsigned_abs();
    // two digits a step (a millisecond time has 13)
    while rest >= 10 {
        let pair = (rest % 100) as usize * 2;
        rest /= 100;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if rest > 0 || at == NUM_MAX {
        at -= 1;
        buf[at] = b'0' + rest as u8;
    }
    if n < 0 {
        at -= 1;
        buf[at] = b'-';
    }
    Num { buf, at: at as u8 }
}

/// "00" to "99", for [`num`].
const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// The longest integer text: `-9223372036854775808`.
const NUM_MAX: usize = 20;

/// [`num`]'s text: the digits at the end of `buf`, from `at`.
#[derive(Clone, Copy)]
pub struct Num {
    buf: [u8; NUM_MAX],
    at: u8,
}

impl std::ops::Deref for Num {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[usize::from(self.at)..]
    }
}

impl std::fmt::Debug for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

/// One swept member, decided, with the score it re-enters pending with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweptMember {
    pub id: Vec<u8>,
    pub verdict: Swept,
    pub priority: i64,
}

/// The sweep's writes: every member leaves active (one ZREM), then each verdict's writes;
/// the pending and dead adds are batched into one ZADD each, the dead count into one HINCRBY
/// whose reply `failed_count` predicts. `keys` = active, pending, dead; a death is scored
/// `now`, the time it died.
pub fn sweep_plan(
    q: &Keyspace<'_>,
    keys: [&[u8]; 3],
    members: &[SweptMember],
    failed_count: Option<i64>,
    now: i64,
) -> Vec<Op<'static>> {
    let [active, pending, dead] = keys;
    let mut plan = Vec::with_capacity(members.len() + 4);
    if members.is_empty() {
        return plan;
    }
    let mut zrem = vec![active.to_vec()];
    zrem.extend(members.iter().map(|m| m.id.clone()));
    plan.push(owned_op(Cmd::Zrem, zrem, Expect::Int(members.len() as i64)));
    let mut to_pending = vec![pending.to_vec()];
    let mut to_dead = vec![dead.to_vec()];
    let mut died = 0i64;
    for m in members {
        let row = q.row(&m.id);
        match m.verdict {
            Swept::Ghost => continue,
            Swept::Exempt => {
                plan.push(owned_op(
                    Cmd::Hset,
                    vec![
                        row.to_vec(),
                        b"state".to_vec(),
                        State::Pending.field().to_vec(),
                    ],
                    Expect::AnyInt,
                ));
            }
            Swept::Recover(st) => {
                plan.push(owned_op(
                    Cmd::Hset,
                    vec![
                        row.to_vec(),
                        b"stalled".to_vec(),
                        num(st).to_vec(),
                        b"state".to_vec(),
                        State::Pending.field().to_vec(),
                    ],
                    Expect::AnyInt,
                ));
            }
            Swept::Die(st) => {
                plan.push(owned_op(
                    Cmd::Hset,
                    vec![
                        row.to_vec(),
                        b"stalled".to_vec(),
                        num(st).to_vec(),
                        b"state".to_vec(),
                        State::Dead.field().to_vec(),
                        b"last_error".to_vec(),
                        b"stalled".to_vec(),
                        b"failed".to_vec(),
                        num(now).to_vec(),
                    ],
                    Expect::AnyInt,
                ));
                to_dead.push(num(now).to_vec());
                to_dead.push(m.id.clone());
                died += 1;
                continue;
            }
        }
        to_pending.push(num(m.priority).to_vec());
        to_pending.push(m.id.clone());
    }
    if to_pending.len() > 1 {
        plan.push(owned_op(Cmd::Zadd, to_pending, Expect::AnyInt));
    }
    if died > 0 {
        plan.push(owned_op(Cmd::Zadd, to_dead, Expect::AnyInt));
        plan.push(owned_op(
            Cmd::Hincrby,
            vec![
                q.metrics_failed().to_vec(),
                b"count".to_vec(),
                num(died).to_vec(),
            ],
            failed_count.map_or(Expect::AnyInt, Expect::Int),
        ));
    }
    plan
}

/// Does a due time written to schedule bring the queue's next due time earlier? `first` is
/// schedule's lowest score before the write. Only then is schedule signalled, so a blocked
/// BCLAIM (whose caller bounded its timeout by the old next due time) wakes to recompute it.
pub fn earlier(due: i64, first: Option<i64>) -> bool {
    first.is_none_or(|f| due < f)
}

/// Where a BCLAIM stands when CLAIM's checks have run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The command itself; `may_block` is false inside MULTI, a script, or where the server
    /// denies blocking.
    Called { may_block: bool },
    /// A wake: a key it waits on was signalled; `by_schedule` when that key is schedule.
    Woken { by_schedule: bool },
}

/// What BCLAIM does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Answer what CLAIM answered (a job, the empty array, or a refusal).
    Reply,
    /// Block the caller on the queue.
    Block,
    /// Stay blocked, answer nothing.
    Wait,
}

/// BCLAIM's decision. `idle`: CLAIM would answer empty having written nothing (paused, or
/// pending empty); a job, a ghost popped, or a refusal is always answered at once. Woken by
/// schedule with nothing to claim, it answers empty so the caller re-reads the next due time.
pub fn bclaim_next(idle: bool, phase: Phase) -> Next {
    match (idle, phase) {
        (false, _) => Next::Reply,
        (true, Phase::Called { may_block: true }) => Next::Block,
        (true, Phase::Called { may_block: false }) => Next::Reply,
        (true, Phase::Woken { by_schedule: true }) => Next::Reply,
        (true, Phase::Woken { by_schedule: false }) => Next::Wait,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_recycled_plan_keeps_its_vector_for_the_next_batch() {
        let key = b"emq:{q}:active".to_vec();
        let mut plan = spare_plan(300);
        plan.push(op(Cmd::Zrem, &[&key, b"a"], Expect::Int(1)));
        let (at, room) = (plan.as_ptr() as usize, plan.capacity());
        recycle_plan(plan);
        let next: Vec<Op<'_>> = spare_plan(100);
        assert!(next.is_empty());
        assert_eq!((next.as_ptr() as usize, next.capacity()), (at, room));
        // a plan too small to keep is let go: the next one is allocated anew
        recycle_plan(Vec::with_capacity(2));
        assert!(spare_plan(1).capacity() < KEPT_PLAN_MIN);
    }

    #[test]
    fn a_packed_record_is_four_decimals_then_the_result() {
        let packed = |attempts: &[u8], finished: &[u8], seen, result: &[u8]| {
            let mut into = Vec::new();
            super::pack_record(&mut into, attempts, finished, seen, result);
            into
        };
        assert_eq!(
            packed(
                b"1",
                b"1733400000123",
                (Some(b"1733399999000"), Some(b"1733399999500")),
                br#"{"x":1}"#,
            ),
            br#"1,1733400000123,1733399999000,1733399999500,{"x":1}"#
        );
        // no created, no started: empty; a result's commas and NULs are its own bytes
        assert_eq!(
            packed(b"2", b"1733400000123", (None, None), b"a,b\0,"),
            b"2,1733400000123,,,a,b\0,"
        );
        assert_eq!(packed(b"3", b"9", (None, Some(b"8")), b""), b"3,9,,8,");
        // records packed one after another in one buffer: each its own bytes, the first kept
        let mut into = b"1,5,,,ra".to_vec();
        super::pack_record(&mut into, b"2", b"5", (Some(b"3"), None), b"rb");
        assert_eq!(into, b"1,5,,,ra2,5,3,,rb");
    }

    #[test]
    fn records_are_fields_unless_the_switch_is_exactly_record() {
        use super::{record_layout, Layout};
        assert_eq!(record_layout(Some(b"record")), Layout::Record);
        for other in [
            None,
            Some(b"fields".as_slice()),
            Some(b"RECORD"),
            Some(b"record "),
            Some(b""),
        ] {
            assert_eq!(record_layout(other), Layout::Fields, "{other:?}");
        }
    }

    #[test]
    fn num_is_the_integer_text() {
        for n in [
            0,
            7,
            -7,
            10,
            99,
            100,
            101,
            -100,
            1_764_000_000_000,
            i64::MAX,
            i64::MIN,
        ] {
            assert_eq!(&num(n)[..], n.to_string().as_bytes());
        }
    }

    #[test]
    fn admission_reads_the_row_then_the_marker() {
        let v = "EMQ.ENQUEUE.UNIQUE";
        assert_eq!(admission(v, None, false, false), Ok(Admission::Create));
        assert_eq!(admission(v, None, true, true), Ok(Admission::Unique));
        assert_eq!(
            admission(v, Some(Some(b"pending")), false, false),
            Ok(Admission::Exists)
        );
        assert_eq!(
            admission(v, Some(Some(b"pending")), true, false),
            Ok(Admission::Replace(State::Pending))
        );
        assert_eq!(
            admission(v, Some(Some(b"scheduled")), true, false),
            Ok(Admission::Replace(State::Scheduled))
        );
        assert_eq!(
            admission(v, Some(Some(b"active")), true, false),
            Ok(Admission::Exists)
        );
        assert_eq!(
            admission(v, Some(Some(b"dead")), true, false),
            Ok(Admission::Exists)
        );
        assert!(admission(v, Some(Some(b"odd")), true, false).is_err());
        assert!(admission(v, Some(None), true, false).is_err());
        assert_eq!(
            admission(v, Some(None), false, false),
            Ok(Admission::Exists)
        );
    }
    use super::*;

    #[test]
    fn rate_of_reads_meta() {
        assert_eq!(rate_of(None, Some(b"x")), Ok(None));
        assert_eq!(rate_of(Some(b"0"), None), Ok(None));
        assert_eq!(rate_of(Some(b"-3"), Some(b"x")), Ok(None));
        assert_eq!(
            rate_of(Some(b"50"), Some(b"1000")),
            Ok(Some(Rate {
                limit: 50,
                window: 1000
            }))
        );
        assert_eq!(rate_of(Some(b"x"), Some(b"1000")), Err(NOT_INTEGER));
        assert_eq!(rate_of(Some(b"5"), Some(b"1s")), Err(NOT_INTEGER));
        assert_eq!(rate_of(Some(b"5"), None), Err(BAD_RATE));
        assert_eq!(rate_of(Some(b"5"), Some(b"0")), Err(BAD_RATE));
        assert_eq!(rate_of(Some(b"10001"), Some(b"1000")), Err(BAD_RATE));
        assert_eq!(rate_of(Some(b"5"), Some(b"86400001")), Err(BAD_RATE));
    }

    #[test]
    fn rate_wait_is_the_sliding_log() {
        let rate = Rate {
            limit: 3,
            window: 1000,
        };
        assert_eq!(rate_wait(rate, &[], 5000), None);
        assert_eq!(rate_wait(rate, &[4100, 4500], 5000), None);
        // full: the oldest leaves the window at 4100 + 1000
        assert_eq!(rate_wait(rate, &[4100, 4500, 4900], 5000), Some(100));
        // over (the limit was lowered): the count falls under it when the second one leaves
        assert_eq!(rate_wait(rate, &[4100, 4500, 4900, 4950], 5000), Some(500));
        // never 0: a caller that waits the answer finds room
        assert_eq!(rate_wait(rate, &[4000, 4500, 4900], 4999), Some(1));
    }

    #[test]
    fn string2ll_is_valkeys() {
        assert_eq!(string2ll(b"0"), Some(0));
        assert_eq!(string2ll(b"12"), Some(12));
        assert_eq!(string2ll(b"-12"), Some(-12));
        assert_eq!(string2ll(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(string2ll(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            "",
            "-",
            "-0",
            "007",
            "+1",
            " 1",
            "1 ",
            "1.5",
            "9223372036854775808",
            "-9223372036854775809",
            "abc",
            "00",
            "0x1",
        ] {
            assert_eq!(string2ll(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn next_attempt_follows_hincrby() {
        assert_eq!(next_attempt(None), Ok(1));
        assert_eq!(next_attempt(Some(b"0")), Ok(1));
        assert_eq!(next_attempt(Some(b"-5")), Ok(-4));
        assert_eq!(next_attempt(Some(b"x")), Err(NOT_INTEGER));
        assert_eq!(next_attempt(Some(b"9223372036854775807")), Err(OVERFLOW));
        assert_eq!(incr(Some(b"-9223372036854775808"), 1), Ok(i64::MIN + 1));
    }

    #[test]
    fn fail_budget_table() {
        type Case<'a> = (Option<&'a [u8]>, i64, i64, Result<(i64, Budget), &'a str>);
        let cases: [Case; 7] = [
            (None, 3, 0, Ok((1, Budget::Pending))),
            (None, 3, 10, Ok((1, Budget::Scheduled))),
            (Some(b"1"), 3, 0, Ok((2, Budget::Pending))),
            (Some(b"2"), 3, 0, Ok((3, Budget::Dead))),
            (None, 1, 100, Ok((1, Budget::Dead))),
            (Some(b"nope"), 3, 0, Err(NOT_INTEGER)),
            (Some(b"9223372036854775807"), 3, 0, Err(OVERFLOW)),
        ];
        for (failures, max, backoff, want) in cases {
            assert_eq!(fail_budget(failures, max, backoff), want);
        }
    }

    fn seen<'a>(
        row: RowKind,
        group: bool,
        epoch: Option<&'a [u8]>,
        st: Option<&'a [u8]>,
    ) -> MemberSeen<'a> {
        MemberSeen {
            row,
            group,
            lease_epoch: epoch,
            stalled: st,
        }
    }

    #[test]
    fn sweep_verdict_table() {
        let run = b"run".as_slice();
        let cases = [
            (
                seen(RowKind::None, true, None, Some(b"x")),
                Ok(Swept::Ghost),
            ),
            (
                seen(RowKind::Other, false, None, None),
                Err(SweepRefusal::WrongType),
            ),
            (
                seen(RowKind::Hash, true, Some(run), None),
                Err(SweepRefusal::Lane),
            ),
            (
                seen(RowKind::Hash, false, None, Some(b"x")),
                Ok(Swept::Exempt),
            ),
            (
                seen(RowKind::Hash, false, Some(b"old"), None),
                Ok(Swept::Exempt),
            ),
            (
                seen(RowKind::Hash, false, Some(run), None),
                Ok(Swept::Recover(1)),
            ),
            (
                seen(RowKind::Hash, false, Some(run), Some(b"1")),
                Ok(Swept::Die(2)),
            ),
            (
                seen(RowKind::Hash, false, Some(run), Some(b"5")),
                Ok(Swept::Die(6)),
            ),
            (
                seen(RowKind::Hash, false, Some(run), Some(b"x")),
                Err(SweepRefusal::Counter(NOT_INTEGER)),
            ),
        ];
        for (s, want) in cases {
            assert_eq!(decide_member(run, 2, &s), want, "{s:?}");
        }
    }

    #[test]
    fn removable_takes_waiting_and_dead_rows_only() {
        assert_eq!(removable("V", Some(b"pending")), Ok(State::Pending));
        assert_eq!(removable("V", Some(b"scheduled")), Ok(State::Scheduled));
        assert_eq!(removable("V", Some(b"dead")), Ok(State::Dead));
        assert_eq!(
            removable("V", Some(b"active")),
            Err("V row is active: cancel it instead".to_owned())
        );
        assert!(removable("V", Some(b"x")).is_err());
        assert!(removable("V", None).is_err());
    }

    #[test]
    fn a_cleared_member_deletes_its_row_only_where_its_state_names_the_set() {
        assert!(deletes_row(Some(Some(b"dead")), State::Dead));
        assert!(!deletes_row(Some(Some(b"pending")), State::Dead));
        assert!(!deletes_row(Some(None), State::Pending));
        assert!(!deletes_row(None, State::Pending));
    }

    #[test]
    fn sweep_plan_writes_each_verdict() {
        let q = Keyspace { base: b"emq:{q}:" };
        let keys: [&[u8]; 3] = [b"emq:{q}:active", b"emq:{q}:pending", b"emq:{q}:dead"];
        let m = |id: &[u8], verdict, priority| SweptMember {
            id: id.to_vec(),
            verdict,
            priority,
        };
        let members = [
            m(b"g", Swept::Ghost, 0),
            m(b"e", Swept::Exempt, 4),
            m(b"r", Swept::Recover(1), 0),
            m(b"d", Swept::Die(3), 0),
        ];
        let plan = sweep_plan(&q, keys, &members, Some(8), 1_700);
        let shown: Vec<String> = plan
            .iter()
            .map(|o| {
                let args: Vec<String> = o
                    .args
                    .iter()
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                format!("{} {}", o.cmd, args.join(" "))
            })
            .collect();
        assert_eq!(
            shown,
            [
                "ZREM emq:{q}:active g e r d",
                "HSET emq:{q}:job:e state pending",
                "HSET emq:{q}:job:r stalled 1 state pending",
                "HSET emq:{q}:job:d stalled 3 state dead last_error stalled failed 1700",
                "ZADD emq:{q}:pending 4 e 0 r",
                "ZADD emq:{q}:dead 1700 d",
                "HINCRBY emq:{q}:metrics:failed count 1",
            ]
        );
        assert_eq!(plan[0].expect, Expect::Int(4));
        assert_eq!(plan[6].expect, Expect::Int(8));
        assert!(sweep_plan(&q, keys, &[], None, 1_700).is_empty());
    }

    #[test]
    fn schedule_is_signalled_only_when_the_next_due_time_moves_earlier() {
        assert!(earlier(100, None));
        assert!(earlier(99, Some(100)));
        assert!(!earlier(100, Some(100)));
        assert!(!earlier(101, Some(100)));
    }

    #[test]
    fn bclaim_blocks_only_when_claim_would_answer_empty_having_written_nothing() {
        use Next::*;
        use Phase::*;
        let called = |may_block| Called { may_block };
        let woken = |by_schedule| Woken { by_schedule };
        // a job, a ghost or a refusal: answered at once, whatever the phase
        for phase in [called(true), called(false), woken(true), woken(false)] {
            assert_eq!(bclaim_next(false, phase), Reply, "{phase:?}");
        }
        assert_eq!(bclaim_next(true, called(true)), Block);
        // MULTI, scripts: as CLAIM
        assert_eq!(bclaim_next(true, called(false)), Reply);
        // woken by pending (or a resume) with still nothing to claim: keep waiting
        assert_eq!(bclaim_next(true, woken(false)), Wait);
        // woken by an earlier due time: answer empty so the caller recomputes its timeout
        assert_eq!(bclaim_next(true, woken(true)), Reply);
    }

    #[test]
    fn the_event_switch_is_a_bound_or_off() {
        assert_eq!(events_bound(None), Ok(None));
        assert_eq!(events_bound(Some(b"0")), Ok(None));
        assert_eq!(events_bound(Some(b"-5")), Ok(None));
        assert_eq!(events_bound(Some(b"100")), Ok(Some(100)));
        assert_eq!(events_bound(Some(b"100000")), Ok(Some(EVENTS_MAX)));
        assert_eq!(events_bound(Some(b"100001")), Ok(Some(EVENTS_MAX)));
        for bad in [b"ten".as_slice(), b"", b"01", b" 1", b"1.5"] {
            assert_eq!(events_bound(Some(bad)), Err(NOT_INTEGER), "{bad:?}");
        }
    }

    #[test]
    fn a_new_row_carries_priority_only_above_zero() {
        let pending = crate::state::State::Pending.field();
        let plain = new_row(b"r", pending, b"p", b"7", (0, b"0"), None);
        assert_eq!(
            plain.args.iter().collect::<Vec<_>>(),
            [
                &b"r"[..],
                b"state",
                pending,
                b"payload",
                b"p",
                b"attempts",
                b"0",
                b"created",
                b"7"
            ]
        );
        assert_eq!((plain.cmd, plain.expect), (Cmd::Hset, Expect::Int(4)));
        let urgent = new_row(b"r", pending, b"p", b"7", (3, b"3"), Some(b"9"));
        let args: Vec<_> = urgent.args.iter().collect();
        assert_eq!(&args[9..], [&b"priority"[..], b"3", b"unique", b"9"]);
        assert_eq!(urgent.expect, Expect::Int(6));
    }

    #[test]
    fn each_sweep_verdict_tells_its_events() {
        let kinds = |v| sweep_events(v).iter().map(|(k, _)| *k).collect::<Vec<_>>();
        assert!(kinds(Swept::Ghost).is_empty());
        assert_eq!(kinds(Swept::Exempt), [b"recovered".as_slice()]);
        assert_eq!(
            kinds(Swept::Recover(1)),
            [b"stalled".as_slice(), b"recovered"]
        );
        assert_eq!(kinds(Swept::Die(3)), [b"stalled".as_slice(), b"dead"]);
        assert_eq!(
            sweep_events(Swept::Die(3))[1].1,
            [
                b"error".as_slice(),
                b"stalled",
                b"state",
                State::Dead.field()
            ]
        );
    }

    #[test]
    fn a_row_lookup_leaves_the_seldom_fields_last_and_counts_the_leased_ones_not_asked_for() {
        // PUBLISH's check: HELD, `created`, `started`, `unique`
        let asked = [
            "attempts", "state", "group", "parent", "created", "started", "unique",
        ];
        let plan = row_lookup(&asked);
        assert_eq!(plan.seldom, 1 << 2 | 1 << 3 | 1 << 6);
        // `payload` and `lease_epoch` are the leased fields not asked for
        assert_eq!(plan.probes, 1 << 1 | 1 << 4);
        // nothing seldom asked: nothing to count
        assert_eq!(
            row_lookup(&["attempts", "payload"]),
            RowLookup {
                seldom: 0,
                probes: 0
            }
        );
    }

    #[test]
    fn probing_pays_only_when_the_tests_can_account_for_every_field() {
        // a leased row: 4 fields found, 2 to test, 6 in the row
        assert!(probing_pays(6, 4, 2));
        // a seventh field (`priority`, `progress`): the tests cannot show the rest absent
        assert!(!probing_pays(7, 4, 2));
        // every field found already: nothing to test
        assert!(!probing_pays(4, 4, 2));
        assert!(probing_pays(6, 5, 1));
    }
}
