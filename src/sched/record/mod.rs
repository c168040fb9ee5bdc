//! The placement record (`GGML_SCHED_DUMP=DIR`): one JSON file per distinct graph the
//! scheduler splits, with every node's and leaf's placement and its cause, the splits and
//! the bytes their input copies move, the in-place storage of each writer and the moves the
//! in-place rule made. For people and tools (`./ab view` renders it); the format is
//! documented and versioned in `docs/sched-dump.md` ([`FORMAT`], [`VERSION`]).
//!
//! Not in stock. When the variable is unset the scheduler pays one load of a cached value
//! per split ([`dir`]); nothing else of this module runs.

pub mod build;
pub mod moves;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

pub use build::{Record, Settings};
pub use moves::Moves;

/// The record's `format` field.
pub const FORMAT: &str = "ggml-sched-dump";
/// The record's `version` field: bumped whenever a field changes meaning or goes away
/// (added fields keep the version; readers ignore fields they do not know).
pub const VERSION: u32 = 1;
/// The variable that names the directory.
pub const VAR: &str = "GGML_SCHED_DUMP";

/// The dump directory, read from [`VAR`] once per process and cached: `None` when unset or
/// refused (a refused value is named in a warning through ggml's logger). The directory is
/// created when missing.
pub fn dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| match std::env::var_os(VAR) {
        // A Linux path need not be UTF-8 text; the reader of text values would refuse it.
        Some(v) if v.to_str().is_none() => {
            let p = PathBuf::from(v);
            match check_dir(&p) {
                Ok(()) => Some(p),
                Err(e) => {
                    crate::env::warn_sticky(&format!(
                        "ggml_backend_sched: {VAR}={} {e}; using no dump\n",
                        p.display()
                    ));
                    None
                }
            }
        }
        _ => crate::env::read_once(VAR, None, "no dump", parse_dir),
    })
    .as_deref()
}

/// Whether records are written (see [`dir`]).
#[inline]
pub fn enabled() -> bool {
    dir().is_some()
}

/// A value of [`VAR`]: a directory that exists or can be created.
fn parse_dir(text: &str) -> Result<Option<PathBuf>, String> {
    if text.trim().is_empty() {
        return Err("is empty: it must name a directory".into());
    }
    let p = PathBuf::from(text);
    check_dir(&p)?;
    Ok(Some(p))
}

/// Whether `p` is a directory, creating it when missing; else what is wrong with it.
fn check_dir(p: &Path) -> Result<(), String> {
    if p.exists() && !p.is_dir() {
        return Err("is not a directory".into());
    }
    std::fs::create_dir_all(p).map_err(|e| format!("cannot be created ({e})"))
}

/// The (structure, placement) hashes of the records this process has written, and how many.
type Seen = (HashSet<(u64, u64)>, usize);

/// The process's [`Seen`].
fn seen() -> &'static Mutex<Seen> {
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    SEEN.get_or_init(Default::default)
}

/// Writes the record of `inp`'s graph into `dir` as `sched-PID-SEQ.json` unless this
/// process already wrote one of the same graph placed the same way (same
/// [`build::hashes`]; only those are computed then). `SEQ` counts this process's records
/// from 0 (written into the record as `seq`). Write errors are logged (once per process),
/// never fatal: the record is a diagnostic.
///
/// # Safety
/// As [`build::collect`].
pub unsafe fn write(dir: &Path, inp: &build::Input) {
    // SAFETY: this function's contract is `hashes`'s.
    let key = unsafe { build::hashes(inp) };
    let seq = {
        let mut s = seen().lock().unwrap_or_else(|e| e.into_inner());
        if !s.0.insert(key) {
            return;
        }
        s.1 += 1;
        s.1 - 1
    };
    // SAFETY: as above.
    let mut rec = unsafe { build::collect(inp) };
    rec.seq = seq;
    let pid = std::process::id();
    let path = dir.join(format!("sched-{pid}-{seq:03}.json"));
    let tmp = dir.join(format!(".sched-{pid}-{seq:03}.json.tmp"));
    let res = serde_json::to_vec(&rec)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&tmp, bytes))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = res {
        static WARNED: OnceLock<()> = OnceLock::new();
        WARNED.get_or_init(|| {
            crate::ffi::log::warn(&format!(
                "ggml_backend_sched: {VAR}: cannot write {}: {e}; later records may be missing\n",
                path.display()
            ))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_values() {
        assert_eq!(
            parse_dir(""),
            Err("is empty: it must name a directory".to_string())
        );
        assert_eq!(
            parse_dir("  "),
            Err("is empty: it must name a directory".to_string())
        );
        assert_eq!(
            parse_dir("Cargo.toml"),
            Err("is not a directory".to_string())
        );
        let d = std::env::temp_dir().join(format!("sched-dump-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!(parse_dir(d.to_str().unwrap()), Ok(Some(d.clone())));
        assert!(d.is_dir(), "created");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The variable is read once: setting it later in the process changes nothing (the
    /// scheduler's per-split cost is the cached load). No test of this binary sets it first.
    #[test]
    fn read_once_and_cached() {
        let first = dir().map(Path::to_path_buf);
        assert_eq!(
            first, None,
            "GGML_SCHED_DUMP must be unset for the unit tests"
        );
        std::env::set_var(VAR, std::env::temp_dir());
        assert_eq!(dir().map(Path::to_path_buf), first);
        assert!(!enabled());
        std::env::remove_var(VAR);
    }
}
