//! EMQ.EXTENDS: EXTEND for many (id, token) pairs in one command (SPEC §3, §5.2). A pair
//! whose row is not held (no row, other token, not active) answers 0 and writes nothing.

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use std::borrow::Cow;

use crate::decide::{num, Args, Cmd, Expect, Op};
use crate::errors::Refusal;
use crate::grammar::{self, Argc};
use crate::host::{int, Host};
use crate::verbs::{held, LeaseCheck, ANY_ROW};

pub const VERB: &str = "EMQ.EXTENDS";
/// KEYS, after the numkeys argument (also the key-spec the table registers).
pub const NUMKEYS: usize = 2;

pub fn run(ctx: &Context, args: &[&[u8]]) -> ValkeyResult {
    // 1. shape: numkeys 2, lease_ms then 1..=1000 pairs
    let call = grammar::shape(VERB, args, NUMKEYS, Argc::LeadThenPairs)?;
    // 2. layout: active, base
    let q = grammar::layout(&call, &["active"])?;
    let active = call.keys[0];
    // 3. arguments: lease_ms, then each id (tokens are bytes)
    let lease = grammar::lease_ms(call.argv[0])?;
    let pairs: Vec<(&[u8], &[u8])> = call.argv[1..]
        .chunks_exact(2)
        .map(|p| Ok((grammar::id(p[0])?, p[1])))
        .collect::<Result<_, Refusal>>()?;
    let h = Host::new(ctx, VERB);
    let deadline = grammar::at("lease_ms", h.now_ms()?, lease)?;
    // 4.–5. fence and reads, pair by pair; a pair not held answers 0 instead of refusing
    let fence = h.fence();
    let mut replies = Vec::with_capacity(pairs.len());
    let at = num(deadline);
    let mut zadd: Vec<Cow<[u8]>> = vec![Cow::Borrowed(active)];
    let mut stamps: Vec<Op> = Vec::new();
    let run_id = h.epoch()?;
    for (id, token) in &pairs {
        let row = q.row(id);
        let ok = match held(
            &h,
            &fence,
            &row,
            (active, LeaseCheck::Score),
            (id, token),
            ANY_ROW,
            &[],
        ) {
            Ok(Some(_)) => true,
            Ok(None) | Err(Refusal::State(_)) => false,
            Err(other) => return Err(other.into()),
        };
        if !ok {
            replies.push(int(0));
            continue;
        }
        fence.write(&row)?;
        zadd.extend([Cow::Borrowed(&at[..]), Cow::Borrowed(*id)]);
        stamps.push(Op {
            cmd: Cmd::Hset,
            args: Args::Many(vec![
                Cow::Owned(row.to_vec()),
                Cow::Borrowed(b"lease_epoch"),
                Cow::Borrowed(run_id),
            ]),
            expect: Expect::AnyInt,
        });
        replies.push(int(deadline));
    }
    // 6.–7. writes, each replicated as its effect: one ZADD for every held pair (all
    // members exist), one stamp per row
    if zadd.len() > 1 {
        h.write(&Op {
            cmd: Cmd::Zadd,
            args: Args::Many(zadd),
            expect: Expect::Int(0),
        })?;
        h.apply(&stamps)?;
    }
    Ok(ValkeyValue::Array(replies))
}
