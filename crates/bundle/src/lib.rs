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
//!
//! Beside where the files are, what every binary of the harness needs the same way: the
//! bundle's check against its manifest, the locks of the folders they write, paths the
//! dynamic loader can take, children that end with the harness, and the folder the user
//! called it from, against which their relative paths are taken ([`caller_path`]).

mod caller;
mod lock;
mod manifest;
mod process;

pub use caller::{
    caller_dir, caller_env, caller_path, caller_path_parser, caller_search_list, take_caller_dir,
    CALLER_DIR_VAR,
};
pub use lock::{lock_dir, lock_file, lock_file_waiting};
pub use manifest::{verify, CORE_FILES};
pub use process::{
    check_loader_path, die_with_parent, loader_split_char, write_script, GroupGuard,
};

use std::path::{Path, PathBuf};

/// The file that marks a bundle's root: a JSON manifest (each file with its sha256, the
/// commit it was built from).
pub const MARKER: &str = "ab-bundle.json";

/// The bundle root this process runs from: the folder of the running binary when it holds
/// [`MARKER`], else None (a workspace, or a binary copied elsewhere).
///
/// Errors: the folder holds part of a bundle (`lib/libggml-base.so.0`, `lib/libab_probe.so`
/// or `cabi-tests/` beside the binary) but no manifest that is a file. Such a bundle was
/// copied in part; were it taken for a binary copied elsewhere, the tools would look for a
/// workspace and run its libraries instead of the bundle's.
pub fn root() -> Result<Option<PathBuf>, String> {
    let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.canonicalize().ok())
        .and_then(|e| e.parent().map(Path::to_path_buf))
    else {
        return Ok(None);
    };
    if is_bundle(&dir) {
        return Ok(Some(dir));
    }
    if has_bundle_shape(&dir) {
        return Err(format!(
            "{} holds a bundle's files but no manifest {MARKER} (missing, or not a file): the \
             bundle was copied in part; unpack it again from its .tar.gz, or make a new one \
             with `ab bundle` in a workspace",
            dir.display()
        ));
    }
    Ok(None)
}

/// Whether `dir` holds a part of what a bundle holds besides its manifest: our library or
/// the probe under `lib/`, or the C sources under `cabi-tests/` (a workspace's
/// `target/release/`, where the binaries are built, holds none of them).
pub(crate) fn has_bundle_shape(dir: &Path) -> bool {
    let lib = lib_dir(dir);
    lib.join("libggml-base.so.0").exists()
        || lib.join("libab_probe.so").exists()
        || dir.join("cabi-tests").is_dir()
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
        assert_eq!(root(), Ok(None));
    }
}
