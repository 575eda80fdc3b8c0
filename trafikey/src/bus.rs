//! The bus (docs/spec.md §12): what the bus verbs and the verbs that emit events write
//! besides their move: the queue's event stream, a job's completed record and its outcome
//! channel. Each is derived from the queue's base, so it shares the queue's hashtag, and each
//! is checked (type, fence) in step 4–5 and written in step 6 with the move.

use crate::decide::{events_bound, num, owned_op, record_layout, Cmd, Expect, Layout, Op};
use crate::errors::Refusal;
use crate::ffi::Str;
use crate::grammar::{Keyspace, EVENT_VALUE_MAX_LEN};
use crate::host::{Fence, Host};

/// The queue's event stream, on when `meta events` holds a bound.
pub struct Events {
    key: Vec<u8>,
    bound: Vec<u8>,
}

/// Steps 4–5: read the queue's switch (`meta events`); when on, the stream must be a stream
/// or nothing, and the caller may write it. `None` when events are off.
pub fn events(
    h: &Host<'_>,
    fence: &Fence<'_>,
    q: &Keyspace<'_>,
) -> Result<Option<Events>, Refusal> {
    let meta = q.meta();
    fence.read(&meta)?;
    let stored = h.hash(&meta, &["events"])?.and_then(|mut m| m.take(0));
    events_on(h, fence, q, stored.as_deref())
}

/// [`events`], and whether a result waiter follows the queue (`meta waiters` present and not
/// `0`; any other value tells, it is never refused), from one read of `meta`: COMPLETE and FAIL
/// tell an outcome only then (docs/spec.md §12).
pub fn switches(
    h: &Host<'_>,
    fence: &Fence<'_>,
    q: &Keyspace<'_>,
) -> Result<(Option<Events>, bool), Refusal> {
    let meta = q.meta();
    fence.read(&meta)?;
    let (stored, waiters) = match h.hash(&meta, &["events", "waiters"])? {
        Some(mut m) => (m.take(0), m.take(1)),
        None => (None, None),
    };
    let waited = waiters.is_some_and(|w| w.as_ref() != b"0");
    Ok((events_on(h, fence, q, stored.as_deref())?, waited))
}

/// Step 5 of keeping completed records: where the queue keeps them, its `meta results` read
/// ([`record_layout`]); before the first write, so a switch turned before the command is the
/// one it follows.
pub fn results_layout(
    h: &Host<'_>,
    fence: &Fence<'_>,
    q: &Keyspace<'_>,
) -> Result<Layout, Refusal> {
    let meta = q.meta();
    fence.read(&meta)?;
    let stored = h.hash(&meta, &["results"])?.and_then(|mut m| m.take(0));
    Ok(record_layout(stored.as_deref()))
}

/// [`events`] from a `meta events` value the verb already read (CLAIM reads `meta` once).
pub fn events_on(
    h: &Host<'_>,
    fence: &Fence<'_>,
    q: &Keyspace<'_>,
    stored: Option<&[u8]>,
) -> Result<Option<Events>, Refusal> {
    let Some(bound) = events_bound(stored).map_err(Refusal::Counter)? else {
        return Ok(None);
    };
    let key = q.events();
    h.expect_stream(&key)?;
    fence.write(&key)?;
    Ok(Some(Events {
        key: key.to_vec(),
        bound: num(bound).to_vec(),
    }))
}

impl Events {
    /// One event: `XADD events MAXLEN <bound> * type <kind> id <id> attempt <n> [extra…]`
    /// (owned: events are written only when a queue turns them on). `extra` is name, value, …;
    /// each value keeps at most its first EVENT_VALUE_MAX_LEN bytes (the row keeps it whole).
    pub fn op(&self, kind: &[u8], id: &[u8], attempt: &[u8], extra: &[&[u8]]) -> Op<'static> {
        let mut args: Vec<Vec<u8>> = [
            self.key.as_slice(),
            &self.bound,
            b"type",
            kind,
            b"id",
            id,
            b"attempt",
            attempt,
        ]
        .iter()
        .map(|a| a.to_vec())
        .collect();
        args.extend(extra.iter().enumerate().map(|(i, a)| {
            let keep = if i % 2 == 1 {
                a.len().min(EVENT_VALUE_MAX_LEN)
            } else {
                a.len()
            };
            a.get(..keep).unwrap_or(a).to_vec()
        }));
        owned_op(Cmd::Xadd, args, Expect::AnyId)
    }
}

/// A job's outcome channel, `base .. 'outcome:' .. id` ([`Keyspace::outcome`]), when the caller
/// may publish on it (checked before the first write, published after the last). The message
/// is a wake-up, not state: a caller without the permission still makes its move, untold.
pub fn outcome_channel(
    fence: &Fence<'_>,
    q: &Keyspace<'_>,
    id: &[u8],
) -> Result<Option<Str>, Refusal> {
    fence.publishable(&q.outcome(id))
}
