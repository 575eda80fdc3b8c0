//! The module's version is the package's: read `echomq/VERSION` (the one place the version lives,
//! docs/compatibility.md "Versions") and write `release.rs` for `lib.rs`: the version as text and
//! as MODULE LIST's number (`src/version.rs`).

#[path = "src/version.rs"]
mod version;

use std::path::PathBuf;

fn main() -> Result<(), String> {
    let crate_dir =
        std::env::var("CARGO_MANIFEST_DIR").map_err(|e| format!("CARGO_MANIFEST_DIR: {e}"))?;
    let file = PathBuf::from(crate_dir).join("../echomq/VERSION");
    println!("cargo:rerun-if-changed={}", file.display());
    let text = std::fs::read_to_string(&file).map_err(|e| {
        format!("{}: {e} (trafikey builds inside the echomq source tree, which keeps its version there)", file.display())
    })?;
    let dotted = text.trim();
    let number = version::module_number(dotted).map_err(|e| format!("{}: {e}", file.display()))?;
    let out = PathBuf::from(std::env::var("OUT_DIR").map_err(|e| format!("OUT_DIR: {e}"))?)
        .join("release.rs");
    let source = format!(
        "/// The package's version, from `echomq/VERSION`.\npub const VERSION: &str = {dotted:?};\n\
         /// [`VERSION`] as MODULE LIST shows it (`version::module_number`).\npub const MODULE_VERSION: i32 = {number};\n"
    );
    std::fs::write(&out, source).map_err(|e| format!("{}: {e}", out.display()))
}
