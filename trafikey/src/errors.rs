//! The refusal codes of SPEC §5, defined once. Every refusal is an error reply whose first
//! word is its code; the pure modules build a [`Refusal`], the host turns it into a reply.

use std::fmt;

use valkey_module::ValkeyError;

/// `EMQ` text: a counter that HINCRBY would refuse as not an integer.
pub const NOT_INTEGER: &str = "hash value is not an integer";
/// `EMQ` text: a counter that HINCRBY would refuse as overflowing.
pub const OVERFLOW: &str = "increment or decrement would overflow";
/// The server's own WRONGTYPE text, so clients map it like any other WRONGTYPE.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
/// The lane boundary (§5.5).
pub const LANE: &str = "lane row is not native";
/// The flow boundary (§5.5).
pub const FLOW: &str = "flow child is not native";

/// Why a verb answers with an error and writes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `EMQSHAPE`: numkeys or the ARGV count is not the verb's.
    Shape(String),
    /// `EMQLAYOUT`: the keys are not one queue's layout.
    Layout(String),
    /// `EMQARG <name> …`: an argument outside its grammar.
    Arg(&'static str, String),
    /// `NOPERM`: the caller's ACL forbids a derived key.
    NoPerm(String),
    /// `WRONGTYPE`: a key holds the wrong kind of value.
    WrongType,
    /// `EMQSTATE`: the row is not where the verb moves it from.
    State(String),
    /// `EMQ`: a counter is not an integer or would overflow (the HINCRBY texts).
    Counter(&'static str),
    /// `EMQHOST`: the server answered an internal call unexpectedly.
    Host(String),
}

impl Refusal {
    pub fn lane() -> Self {
        Refusal::State(LANE.to_owned())
    }

    pub fn flow() -> Self {
        Refusal::State(FLOW.to_owned())
    }

    /// The code, the first word of the reply.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Shape(_) => "EMQSHAPE",
            Refusal::Layout(_) => "EMQLAYOUT",
            Refusal::Arg(..) => "EMQARG",
            Refusal::NoPerm(_) => "NOPERM",
            Refusal::WrongType => "WRONGTYPE",
            Refusal::State(_) => "EMQSTATE",
            Refusal::Counter(_) => "EMQ",
            Refusal::Host(_) => "EMQHOST",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::WrongType => f.write_str(WRONGTYPE),
            Refusal::Arg(name, why) => write!(f, "EMQARG {name} {why}"),
            Refusal::Counter(text) => write!(f, "EMQ {text}"),
            Refusal::Shape(t)
            | Refusal::Layout(t)
            | Refusal::NoPerm(t)
            | Refusal::State(t)
            | Refusal::Host(t) => write!(f, "{} {t}", self.code()),
        }
    }
}

impl From<Refusal> for ValkeyError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::WrongType => ValkeyError::WrongType,
            other => ValkeyError::String(other.to_string()),
        }
    }
}

/// Bytes made printable for an error text: keys and ids are binary, replies are not.
pub fn printable(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes.iter().take(128) {
        if b.is_ascii_graphic() || b == b' ' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if bytes.len() > 128 {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reply_starts_with_its_code() {
        let all = [
            Refusal::Shape("x".into()),
            Refusal::Layout("x".into()),
            Refusal::Arg("lease_ms", "x".into()),
            Refusal::NoPerm("x".into()),
            Refusal::WrongType,
            Refusal::State("x".into()),
            Refusal::Counter(NOT_INTEGER),
            Refusal::Host("x".into()),
        ];
        for r in all {
            let text = r.to_string();
            assert_eq!(text.split(' ').next(), Some(r.code()), "{text}");
        }
        assert_eq!(
            Refusal::Counter(OVERFLOW).to_string(),
            "EMQ increment or decrement would overflow"
        );
        assert_eq!(
            Refusal::lane().to_string(),
            "EMQSTATE lane row is not native"
        );
    }

    #[test]
    fn printable_escapes_binary() {
        assert_eq!(printable(b"a\x00\xff b"), "a\\x00\\xff b");
    }
}
