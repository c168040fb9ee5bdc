//! Where the harness's files are. Two layouts:
//!
//! - a **workspace** checkout: the root holds `pins.toml` and `Cargo.toml`; binaries are in
//!   `target/release/`, our libraries in `target/ours/lib/`, the probe in
//!   `target/release/libab_probe.so`;
//! - a **bundle** written by `ab bundle` for a machine without cargo: one folder holding the
//!   marker [`MARKER`], the binaries (`ab`, `bench`) at its top, our libraries and the probe in
//!   `lib/`, the C sources the tools compile at run time under `cabi-tests/` (as in the
//!   workspace), and `pins.toml`; what the tools write goes under its `target/`.
//!
//! A binary is in a bundle when the folder it was started from holds the marker; nothing else
//! is needed to find the rest.

use std::path::{Path, PathBuf};

/// The file that marks a bundle's root: a JSON manifest (each file with its sha256, the
/// commit it was built from).
pub const MARKER: &str = "ab-bundle.json";

/// The bundle root this process runs from: the folder of the running binary when it holds
/// [`MARKER`], else None (a workspace, or a binary copied elsewhere).
pub fn root() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?.canonicalize().ok()?;
    let dir = exe.parent()?;
    is_bundle(dir).then(|| dir.to_path_buf())
}

/// Whether `dir` is a bundle root (holds [`MARKER`]).
pub fn is_bundle(dir: &Path) -> bool {
    dir.join(MARKER).is_file()
}

/// The folder of our libraries (`libggml-base.so.0`, `libggml-hrx.so`) and the probe
/// (`libab_probe.so`) in a bundle.
pub fn lib_dir(root: &Path) -> PathBuf {
    root.join("lib")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_is_a_bundle_only_with_the_marker() {
        let d = std::env::temp_dir().join(format!("bundle-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        assert!(!is_bundle(&d));
        std::fs::write(d.join(MARKER), "{}").unwrap();
        assert!(is_bundle(&d));
        assert_eq!(lib_dir(&d), d.join("lib"));
        std::fs::remove_dir_all(&d).unwrap();
        // the test binary itself lives in target/, not in a bundle
        assert_eq!(root(), None);
    }
}
