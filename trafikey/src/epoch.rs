//! The server epoch: `run_id`, read once at load (SPEC §2), and the one comparison the sweep
//! makes on a lease's stamp.

use std::sync::OnceLock;

static RUN_ID: OnceLock<Vec<u8>> = OnceLock::new();

/// Keep the `run_id` read at load. A second call (a module reload in the same process keeps
/// the process's statics) keeps the first value, which is the same server's.
pub fn set(run_id: Vec<u8>) {
    let _ = RUN_ID.set(run_id);
}

/// The current epoch, when the module loaded with one.
pub fn current() -> Option<&'static [u8]> {
    RUN_ID.get().map(Vec::as_slice)
}

/// Pure: an expired lease is restart-caused (exempt from the stall count) when its
/// `lease_epoch` is missing or differs from the current `run_id`.
pub fn exempt(lease_epoch: Option<&[u8]>, current: &[u8]) -> bool {
    lease_epoch != Some(current)
}

#[cfg(test)]
mod tests {
    use super::exempt;

    #[test]
    fn exempt_when_missing_or_foreign() {
        assert!(exempt(None, b"abc"));
        assert!(exempt(Some(b"old"), b"abc"));
        assert!(exempt(Some(b""), b"abc"));
        assert!(!exempt(Some(b"abc"), b"abc"));
    }
}
