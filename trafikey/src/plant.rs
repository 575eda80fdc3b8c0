//! Planted defects for the parity instrument (SPEC §8). This module exists only in a build
//! with `--features planted`; a release build has neither it nor any planted branch.
//!
//! The switch is the environment variable `TRAFIKEY_PLANT`, read once at module load: it names
//! at most one defect, and every planted branch asks [`on`] for its own name. The instrument
//! (`python -m echomq.parity --plants`) starts a server with one name at a time and must report
//! the defect as UNEXPECTED; the names and their verbs are listed in `echomq/parity/plants.py`.

use std::sync::OnceLock;

static PLANT: OnceLock<Option<String>> = OnceLock::new();

/// Read `TRAFIKEY_PLANT` once, at load.
pub fn load() {
    let _ = PLANT.set(
        std::env::var("TRAFIKEY_PLANT")
            .ok()
            .filter(|p| !p.is_empty()),
    );
}

/// Is the defect `name` switched on?
pub fn on(name: &str) -> bool {
    matches!(PLANT.get(), Some(Some(p)) if p == name)
}
