//! What the harness's integration tests share.

use std::path::{Path, PathBuf};

/// The workspace root (two folders above this crate), resolved.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}
