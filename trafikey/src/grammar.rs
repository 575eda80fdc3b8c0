//! Pure: the argument grammar of SPEC §3 and the first three checks of §5 (shape, layout,
//! arguments). No server calls; the handlers feed it the raw argv bytes.

use crate::errors::{printable, Refusal};

/// `lease_ms` ≥ 1.
pub const LEASE_MIN: i64 = 1;
/// `delay_ms`, `backoff_ms` ≥ 0.
pub const DELAY_MIN: i64 = 0;
/// `limit` 1..=10000.
pub const LIMIT_MIN: i64 = 1;
pub const LIMIT_MAX: i64 = 10_000;
/// `max_attempts`, `max_stalled` ≥ 1.
pub const BUDGET_MIN: i64 = 1;
/// `priority` 0..=2^31−1.
pub const PRIORITY_MAX: i64 = (1 << 31) - 1;
/// `id` 1..=512 bytes.
pub const ID_MAX_LEN: usize = 512;
/// BCLAIM `timeout_ms` 0..=2^31−1 (0 blocks until served, as BLPOP's 0; a longer finite wait
/// has no use a worker needs, and the bound keeps the server's `now + timeout` far from
/// overflowing).
pub const TIMEOUT_MAX: i64 = (1 << 31) - 1;
/// `progress` (APPEND): at most 64 KiB.
pub const PROGRESS_MAX_LEN: usize = 64 * 1024;
/// EXTENDS: at most this many (id, token) pairs.
pub const EXTENDS_MAX_PAIRS: usize = 1000;
/// CLAIMS: at most this many jobs a command (EXTENDS' bound on pairs).
pub const CLAIMS_MAX: usize = 1000;
/// FAIL's optional `traceback`: at most 8 KiB, any bytes (the client keeps a longer one's tail).
pub const TRACEBACK_MAX_LEN: usize = 8192;
/// FAIL's `error` (the row's `last_error`): at most 4 KiB, any bytes (the client cuts a longer one).
pub const ERROR_MAX_LEN: usize = 4096;
/// An event's values (its `error`, `progress`, `state`) keep at most their first 1 KiB, so an
/// entry is bounded and the stream by its MAXLEN times that (docs/spec.md §12).
pub const EVENT_VALUE_MAX_LEN: usize = 1024;
/// The most entries a queue's event stream keeps: a larger `meta events` is read as this.
pub const EVENTS_MAX: i64 = 100_000;

/// How many ARGV a verb takes after its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Argc {
    /// Exactly this many.
    Exact(usize),
    /// One leading argument, then 1..=EXTENDS_MAX_PAIRS pairs (EXTENDS: odd, ≥ 3, ≤ 2001).
    LeadThenPairs,
    /// 1..=EXTENDS_MAX_PAIRS pairs and nothing before them (COMPLETES: even, ≥ 2, ≤ 2000).
    Pairs,
    /// One leading argument, then 1..=EXTENDS_MAX_PAIRS triples (PUBLISHES: 1 + 3k, ≥ 4, ≤ 3001).
    LeadThenTriples,
    /// 1..=EXTENDS_MAX_PAIRS triples and nothing before them (ENQUEUES: 3k, ≥ 3, ≤ 3000).
    Triples,
    /// This many, then up to `late` optional ones (arguments added after the verb landed,
    /// each with its own token: SPEC §9.4).
    Late(usize, usize),
}

/// A call that passed the shape check: the verb, its KEYS and its ARGV.
#[derive(Debug)]
pub struct Call<'a> {
    pub verb: &'static str,
    pub keys: &'a [&'a [u8]],
    pub argv: &'a [&'a [u8]],
}

/// Check 1, shape: `args` is the full command line (`verb numkeys keys… argv…`).
pub fn shape<'a>(
    verb: &'static str,
    args: &'a [&'a [u8]],
    numkeys: usize,
    argc: Argc,
) -> Result<Call<'a>, Refusal> {
    let given = args.get(1).copied().unwrap_or_default();
    if parse_digits(given) != Some(numkeys as i64) {
        return Err(Refusal::Shape(format!(
            "{verb} takes numkeys {numkeys}, got '{}'",
            printable(given)
        )));
    }
    let rest = args.get(2..).unwrap_or_default();
    if rest.len() < numkeys {
        return Err(Refusal::Shape(format!(
            "{verb} takes {numkeys} keys, got {}",
            rest.len()
        )));
    }
    let (keys, argv) = rest.split_at(numkeys);
    let ok = match argc {
        Argc::Exact(n) => argv.len() == n,
        Argc::Late(n, late) => (n..=n + late).contains(&argv.len()),
        Argc::LeadThenPairs => {
            argv.len() >= 3 && argv.len() % 2 == 1 && argv.len() <= 1 + 2 * EXTENDS_MAX_PAIRS
        }
        Argc::Pairs => {
            argv.len() >= 2 && argv.len() % 2 == 0 && argv.len() <= 2 * EXTENDS_MAX_PAIRS
        }
        Argc::LeadThenTriples => {
            argv.len() >= 4 && argv.len() % 3 == 1 && argv.len() <= 1 + 3 * EXTENDS_MAX_PAIRS
        }
        Argc::Triples => {
            argv.len() >= 3 && argv.len().is_multiple_of(3) && argv.len() <= 3 * EXTENDS_MAX_PAIRS
        }
    };
    if !ok {
        let want = match argc {
            Argc::Exact(n) => n.to_string(),
            Argc::Late(n, late) => format!("{n} to {}", n + late),
            Argc::LeadThenPairs => format!("an odd count from 3 to {}", 1 + 2 * EXTENDS_MAX_PAIRS),
            Argc::Pairs => format!("an even count from 2 to {}", 2 * EXTENDS_MAX_PAIRS),
            Argc::LeadThenTriples => format!("1 + 3k (from 4 to {})", 1 + 3 * EXTENDS_MAX_PAIRS),
            Argc::Triples => format!("3k (from 3 to {})", 3 * EXTENDS_MAX_PAIRS),
        };
        return Err(Refusal::Shape(format!(
            "{verb} takes {want} arguments after the keys, got {}",
            argv.len()
        )));
    }
    Ok(Call { verb, keys, argv })
}

/// One queue's keyspace, from its base `emq:{q}:`; the derived keys share its hashtag.
#[derive(Debug, Clone, Copy)]
pub struct Keyspace<'a> {
    pub base: &'a [u8],
}

/// A derived key's name (or a channel's): built in place when it fits (a row key with a UUID
/// id does), on the heap when longer: a verb derives several per command.
#[derive(Clone)]
pub struct KeyName {
    len: usize,
    inline: [u8; KEY_INLINE],
    heap: Vec<u8>,
}

/// How long a key name [`KeyName`] builds in place.
const KEY_INLINE: usize = 96;

impl KeyName {
    fn of(parts: &[&[u8]]) -> KeyName {
        let len = parts.iter().map(|p| p.len()).sum();
        let mut k = KeyName {
            len,
            inline: [0; KEY_INLINE],
            heap: Vec::new(),
        };
        if len <= KEY_INLINE {
            let mut at = 0;
            for p in parts {
                k.inline[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
        } else {
            k.heap = parts.concat();
        }
        k
    }
}

impl std::ops::Deref for KeyName {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        if self.len <= KEY_INLINE {
            &self.inline[..self.len]
        } else {
            &self.heap
        }
    }
}

impl std::fmt::Debug for KeyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

impl PartialEq for KeyName {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

impl Keyspace<'_> {
    pub fn key(&self, suffix: &[u8]) -> KeyName {
        KeyName::of(&[self.base, suffix])
    }

    /// `base .. 'job:' .. id`
    pub fn row(&self, id: &[u8]) -> KeyName {
        KeyName::of(&[self.base, b"job:", id])
    }

    pub fn meta(&self) -> KeyName {
        self.key(b"meta")
    }

    pub fn metrics_completed(&self) -> KeyName {
        self.key(b"metrics:completed")
    }

    pub fn metrics_failed(&self) -> KeyName {
        self.key(b"metrics:failed")
    }

    /// The rate log (docs/spec.md §13): a zset of the starts within the queue's rate window.
    pub fn rate(&self) -> KeyName {
        self.key(b"rate")
    }

    /// The event stream (the bus).
    pub fn events(&self) -> KeyName {
        self.key(b"events")
    }

    /// `base .. 'done'`: the completed records as fields (a hash: the id, its packed record,
    /// each field's own expiry its retention; docs/spec.md §12).
    pub fn done_fields(&self) -> KeyName {
        self.key(b"done")
    }

    /// `base .. 'outcome:' .. id`: a job's outcome channel (docs/spec.md §12).
    pub fn outcome(&self, id: &[u8]) -> KeyName {
        KeyName::of(&[self.base, b"outcome:", id])
    }

    /// `base .. 'done:' .. id`: a completed job's record as a key of its own (the layout of
    /// `meta results record`), kept for its retention.
    pub fn done(&self, id: &[u8]) -> KeyName {
        KeyName::of(&[self.base, b"done:", id])
    }
}

/// Is `key` a queue base `emq:{q}:` with a non-empty q free of `{` and `}`?
pub fn is_base(key: &[u8]) -> bool {
    match key
        .strip_prefix(b"emq:{".as_slice())
        .and_then(|r| r.strip_suffix(b"}:".as_slice()))
    {
        Some(q) => !q.is_empty() && !q.iter().any(|&b| b == b'{' || b == b'}'),
        None => false,
    }
}

/// Check 2, layout: the last key is the base; every other key is the base plus its suffix,
/// in order.
pub fn layout<'a>(call: &Call<'a>, suffixes: &[&str]) -> Result<Keyspace<'a>, Refusal> {
    let verb = call.verb;
    let n = call.keys.len();
    let base = call.keys.last().copied().unwrap_or_default();
    if !is_base(base) {
        return Err(Refusal::Layout(format!(
            "{verb} key {n} must be a queue base emq:{{q}}: (q non-empty, no braces), got '{}'",
            printable(base)
        )));
    }
    let q = Keyspace { base };
    for (i, (key, suffix)) in call.keys.iter().zip(suffixes).enumerate() {
        let ok = key.len() == base.len() + suffix.len()
            && key.starts_with(base)
            && key.ends_with(suffix.as_bytes());
        if !ok {
            return Err(Refusal::Layout(format!(
                "{verb} key {} must be {}{suffix}, got '{}'",
                i + 1,
                printable(base),
                printable(key)
            )));
        }
    }
    Ok(q)
}

/// ASCII decimal digits only, within i64 (no sign, no spaces).
pub fn parse_digits(raw: &[u8]) -> Option<i64> {
    if raw.is_empty() || !raw.iter().all(u8::is_ascii_digit) {
        return None;
    }
    raw.iter().try_fold(0i64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(i64::from(d - b'0'))
    })
}

/// Check 3, one numeric argument: digits, within i64, within `min..=max`.
pub fn number(name: &'static str, raw: &[u8], min: i64, max: i64) -> Result<i64, Refusal> {
    let n = parse_digits(raw).ok_or_else(|| {
        Refusal::Arg(
            name,
            format!(
                "must be ASCII decimal digits within i64, got '{}'",
                printable(raw)
            ),
        )
    })?;
    if n < min || n > max {
        let range = if max == i64::MAX {
            format!("at least {min}")
        } else {
            format!("from {min} to {max}")
        };
        return Err(Refusal::Arg(name, format!("must be {range}, got {n}")));
    }
    Ok(n)
}

pub fn lease_ms(raw: &[u8]) -> Result<i64, Refusal> {
    number("lease_ms", raw, LEASE_MIN, i64::MAX)
}

pub fn delay(name: &'static str, raw: &[u8]) -> Result<i64, Refusal> {
    number(name, raw, DELAY_MIN, i64::MAX)
}

pub fn limit(raw: &[u8]) -> Result<i64, Refusal> {
    number("limit", raw, LIMIT_MIN, LIMIT_MAX)
}

pub fn budget(name: &'static str, raw: &[u8]) -> Result<i64, Refusal> {
    number(name, raw, BUDGET_MIN, i64::MAX)
}

pub fn priority(raw: &[u8]) -> Result<i64, Refusal> {
    number("priority", raw, 0, PRIORITY_MAX)
}

/// BCLAIM's `timeout_ms`: 0 = no timeout.
pub fn timeout_ms(raw: &[u8]) -> Result<i64, Refusal> {
    number("timeout_ms", raw, 0, TIMEOUT_MAX)
}

/// CLAIM's and BCLAIM's optional `rated` (token `claim.rate`, docs/spec.md §13): `1`, the
/// caller reads a wait in the reply when the queue's rate limit holds the claim.
pub fn rated(raw: Option<&[u8]>) -> Result<bool, Refusal> {
    raw.map(|r| number("rated", r, 1, 1))
        .transpose()
        .map(|r| r.is_some())
}

/// CLAIMS' `count`: 1..=[`CLAIMS_MAX`] jobs.
pub fn claims_count(raw: &[u8]) -> Result<usize, Refusal> {
    number("count", raw, 1, CLAIMS_MAX as i64).map(|n| n as usize)
}

/// The queue whose meta hash `key` is (`emq:{q}:meta`), if it is one: its base.
pub fn base_of_meta(key: &[u8]) -> Option<&[u8]> {
    let base = key.strip_suffix(b"meta".as_slice())?;
    is_base(base).then_some(base)
}

/// `id`: 1..=512 bytes, any bytes.
pub fn id(raw: &[u8]) -> Result<&[u8], Refusal> {
    if raw.is_empty() || raw.len() > ID_MAX_LEN {
        return Err(Refusal::Arg(
            "id",
            format!("must be 1 to {ID_MAX_LEN} bytes, got {}", raw.len()),
        ));
    }
    Ok(raw)
}

/// Bytes of any value, at most `max` of them (FAIL's `traceback`, APPEND's `progress`).
fn at_most<'a>(name: &'static str, raw: &'a [u8], max: usize) -> Result<&'a [u8], Refusal> {
    if raw.len() > max {
        return Err(Refusal::Arg(
            name,
            format!("must be at most {max} bytes, got {}", raw.len()),
        ));
    }
    Ok(raw)
}

/// FAIL's and FAILURES.INCR's `traceback`: 0..=8192 bytes, any bytes.
pub fn traceback(raw: &[u8]) -> Result<&[u8], Refusal> {
    at_most("traceback", raw, TRACEBACK_MAX_LEN)
}

/// FAIL's and FAILURES.INCR's `error`: 0..=4096 bytes, any bytes.
pub fn error(raw: &[u8]) -> Result<&[u8], Refusal> {
    at_most("error", raw, ERROR_MAX_LEN)
}

/// `progress`: 0..=64 KiB, any bytes.
pub fn progress(raw: &[u8]) -> Result<&[u8], Refusal> {
    at_most("progress", raw, PROGRESS_MAX_LEN)
}

/// `retention_ms` ≥ 0 (0 keeps no record).
pub fn retention(raw: &[u8]) -> Result<i64, Refusal> {
    number("retention_ms", raw, DELAY_MIN, i64::MAX)
}

/// A clock value plus a relative delay, refused when it leaves i64.
pub fn at(name: &'static str, now_ms: i64, delta: i64) -> Result<i64, Refusal> {
    now_ms
        .checked_add(delta)
        .ok_or_else(|| Refusal::Arg(name, format!("{delta} overflows the clock")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(parts: &[&'static str]) -> Vec<&'static [u8]> {
        parts.iter().map(|p| p.as_bytes()).collect()
    }

    #[test]
    fn shape_counts_keys_and_args() {
        let a = line(&[
            "EMQ.CLAIM",
            "3",
            "emq:{q}:pending",
            "emq:{q}:active",
            "emq:{q}:",
            "5",
        ]);
        let c = shape("EMQ.CLAIM", &a, 3, Argc::Exact(1)).expect("shape");
        assert_eq!(c.keys.len(), 3);
        assert_eq!(c.argv, [b"5".as_slice()]);
        for bad in [
            line(&["EMQ.CLAIM", "2", "a", "b", "c", "5"]),
            line(&["EMQ.CLAIM", "03x", "a", "b", "c", "5"]),
            line(&["EMQ.CLAIM", "3", "a", "b", "c"]),
            line(&["EMQ.CLAIM", "3", "a", "b", "c", "5", "6"]),
            line(&["EMQ.CLAIM", "3", "a"]),
            line(&["EMQ.CLAIM"]),
        ] {
            let r = shape("EMQ.CLAIM", &bad, 3, Argc::Exact(1)).map(|_| ());
            assert!(matches!(r, Err(Refusal::Shape(_))), "{bad:?}");
        }
    }

    #[test]
    fn late_arguments_may_be_left_out_but_not_exceeded() {
        let mut a = line(&["EMQ.FAIL", "1", "emq:{q}:", "id", "1", "e", "3"]);
        assert!(shape("EMQ.FAIL", &a, 1, Argc::Late(5, 1)).is_err());
        a.push(b"0");
        assert_eq!(
            shape("EMQ.FAIL", &a, 1, Argc::Late(5, 1))
                .expect("five")
                .argv
                .len(),
            5
        );
        a.push(b"tb");
        assert_eq!(
            shape("EMQ.FAIL", &a, 1, Argc::Late(5, 1))
                .expect("six")
                .argv
                .len(),
            6
        );
        a.push(b"x");
        let r = shape("EMQ.FAIL", &a, 1, Argc::Late(5, 1)).map(|_| ());
        assert!(matches!(r, Err(Refusal::Shape(m)) if m.contains("takes 5 to 6 arguments")));
    }

    #[test]
    fn error_is_at_most_4_kib() {
        assert!(error(&[0xff; ERROR_MAX_LEN]).is_ok());
        let r = error(&[b'x'; ERROR_MAX_LEN + 1]).map(|_| ());
        assert!(
            matches!(r, Err(Refusal::Arg("error", m)) if m == "must be at most 4096 bytes, got 4097")
        );
    }

    #[test]
    fn traceback_is_at_most_8_kib() {
        assert_eq!(traceback(b"").expect("empty"), b"");
        assert!(traceback(&[0xff; TRACEBACK_MAX_LEN]).is_ok());
        let r = traceback(&[b'x'; TRACEBACK_MAX_LEN + 1]).map(|_| ());
        assert!(
            matches!(r, Err(Refusal::Arg("traceback", m)) if m == "must be at most 8192 bytes, got 8193")
        );
    }

    /// Which ARGV counts from 0 to 2002 a pairs shape takes.
    fn counts_taken(verb: &'static str, argc: Argc) -> Vec<usize> {
        (0..=2002)
            .filter(|&n| {
                let mut a = line(&[verb, "2", "emq:{q}:active", "emq:{q}:"]);
                a.extend(std::iter::repeat_n(b"x".as_slice(), n));
                shape(verb, &a, 2, argc).is_ok()
            })
            .collect()
    }

    #[test]
    fn extends_shape_is_odd_between_3_and_2001() {
        let taken = counts_taken("EMQ.EXTENDS", Argc::LeadThenPairs);
        assert_eq!(taken, (3..=2001).step_by(2).collect::<Vec<_>>());
    }

    #[test]
    fn completes_shape_is_even_between_2_and_2000() {
        let taken = counts_taken("EMQ.COMPLETES", Argc::Pairs);
        assert_eq!(taken, (2..=2000).step_by(2).collect::<Vec<_>>());
        let a = line(&["EMQ.COMPLETES", "2", "emq:{q}:active", "emq:{q}:", "x"]);
        let e = shape("EMQ.COMPLETES", &a, 2, Argc::Pairs)
            .map(|_| ())
            .unwrap_err_text();
        assert_eq!(
            e,
            "EMQSHAPE EMQ.COMPLETES takes an even count from 2 to 2000 arguments after the keys, got 1"
        );
    }

    #[test]
    fn publishes_shape_is_one_then_triples_between_4_and_3001() {
        let taken = counts_taken("EMQ.PUBLISHES", Argc::LeadThenTriples);
        assert_eq!(taken, (4..=2002).step_by(3).collect::<Vec<_>>());
        let a = line(&[
            "EMQ.PUBLISHES",
            "2",
            "emq:{q}:active",
            "emq:{q}:",
            "1",
            "x",
            "y",
        ]);
        let e = shape("EMQ.PUBLISHES", &a, 2, Argc::LeadThenTriples)
            .map(|_| ())
            .unwrap_err_text();
        assert_eq!(
            e,
            "EMQSHAPE EMQ.PUBLISHES takes 1 + 3k (from 4 to 3001) arguments after the keys, got 3"
        );
    }

    #[test]
    fn enqueues_shape_is_triples_between_3_and_3000() {
        let taken = counts_taken("EMQ.ENQUEUES", Argc::Triples);
        assert_eq!(taken, (3..=2002).step_by(3).collect::<Vec<_>>());
        let mut a = line(&["EMQ.ENQUEUES", "2", "emq:{q}:pending", "emq:{q}:"]);
        a.extend(std::iter::repeat_n(b"x".as_slice(), 3001));
        let e = shape("EMQ.ENQUEUES", &a, 2, Argc::Triples)
            .map(|_| ())
            .unwrap_err_text();
        assert_eq!(
            e,
            "EMQSHAPE EMQ.ENQUEUES takes 3k (from 3 to 3000) arguments after the keys, got 3001"
        );
    }

    #[test]
    fn base_is_emq_brace_q_brace_colon() {
        assert!(is_base(b"emq:{q}:"));
        assert!(is_base(b"emq:{a.b:c-1}:"));
        assert!(is_base(b"emq:{\xff\x00}:"));
        for bad in [
            "emq:{}:",
            "emq:{a{b}:",
            "emq:{a}b}:",
            "emq:{q}",
            "emq:q:",
            "EMQ:{q}:",
            "emq:{q}:x",
            "",
        ] {
            assert!(!is_base(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn layout_checks_suffixes_in_order() {
        let a = line(&[
            "V",
            "3",
            "emq:{q}:pending",
            "emq:{q}:active",
            "emq:{q}:",
            "5",
        ]);
        let c = shape("V", &a, 3, Argc::Exact(1)).expect("shape");
        let q = layout(&c, &["pending", "active"]).expect("layout");
        assert_eq!(&q.row(b"7")[..], b"emq:{q}:job:7");
        assert_eq!(&q.metrics_failed()[..], b"emq:{q}:metrics:failed");
        // a name longer than the in-place buffer is built on the heap, the same bytes
        let long = vec![b'x'; 200];
        assert_eq!(
            &q.row(&long)[..],
            [b"emq:{q}:job:".as_slice(), &long].concat()
        );
        assert!(layout(&c, &["active", "pending"]).is_err());
        let a = line(&[
            "V",
            "3",
            "emq:{q}:pending",
            "emq:{r}:active",
            "emq:{q}:",
            "5",
        ]);
        let c = shape("V", &a, 3, Argc::Exact(1)).expect("shape");
        assert!(matches!(
            layout(&c, &["pending", "active"]),
            Err(Refusal::Layout(_))
        ));
        let a = line(&["V", "2", "emq:{q}:pending", "emq:{q}", "5"]);
        let c = shape("V", &a, 2, Argc::Exact(1)).expect("shape");
        assert!(matches!(layout(&c, &["pending"]), Err(Refusal::Layout(_))));
    }

    #[test]
    fn a_meta_key_names_its_queue() {
        assert_eq!(base_of_meta(b"emq:{q}:meta"), Some(b"emq:{q}:".as_slice()));
        assert_eq!(
            base_of_meta(b"emq:{a:b}:meta"),
            Some(b"emq:{a:b}:".as_slice())
        );
        for other in [
            "emq:{q}:metal",
            "emq:{q}:job:meta",
            "emq:{}:meta",
            "meta",
            "emq:{q}meta",
            "x:{q}:meta",
        ] {
            assert_eq!(base_of_meta(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn numbers_are_plain_digits_within_i64() {
        assert_eq!(parse_digits(b"0"), Some(0));
        assert_eq!(parse_digits(b"007"), Some(7));
        assert_eq!(parse_digits(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            "",
            "-1",
            "+1",
            " 1",
            "1 ",
            "1.0",
            "0x10",
            "9223372036854775808",
            "1e3",
        ] {
            assert_eq!(parse_digits(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn ranges_of_spec_section_3() {
        assert!(lease_ms(b"0").is_err());
        assert!(lease_ms(b"1").is_ok());
        assert!(delay("delay_ms", b"0").is_ok());
        assert!(limit(b"0").is_err());
        assert!(limit(b"10000").is_ok());
        assert!(limit(b"10001").is_err());
        assert!(budget("max_attempts", b"0").is_err());
        assert_eq!(priority(b"2147483647"), Ok(PRIORITY_MAX));
        assert!(priority(b"2147483648").is_err());
        assert!(id(b"").is_err());
        assert!(id(&[b'x'; 512]).is_ok());
        assert!(id(&[b'x'; 513]).is_err());
        assert!(at("lease_ms", i64::MAX - 1, 2).is_err());
        assert_eq!(claims_count(b"1"), Ok(1));
        assert_eq!(claims_count(b"1000"), Ok(CLAIMS_MAX));
        for bad in ["0", "1001", "-1", "", "2.5", "ten"] {
            let e = claims_count(bad.as_bytes()).map(|_| ()).unwrap_err_text();
            assert!(e.starts_with("EMQARG count "), "{bad}: {e}");
        }
        assert_eq!(timeout_ms(b"0"), Ok(0));
        assert_eq!(timeout_ms(b"2147483647"), Ok(TIMEOUT_MAX));
        for bad in ["2147483648", "-1", "", "1.5", "1s"] {
            let e = timeout_ms(bad.as_bytes()).map(|_| ()).unwrap_err_text();
            assert!(e.starts_with("EMQARG timeout_ms "), "{bad}: {e}");
        }
        let e = lease_ms(b"abc").map(|_| ()).unwrap_err_text();
        assert!(e.starts_with("EMQARG lease_ms "), "{e}");
    }

    trait ErrText {
        fn unwrap_err_text(self) -> String;
    }
    impl ErrText for Result<(), Refusal> {
        fn unwrap_err_text(self) -> String {
            match self {
                Ok(()) => String::new(),
                Err(e) => e.to_string(),
            }
        }
    }
}
