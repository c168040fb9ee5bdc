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
//! dynamic loader can take, and children that end with the harness.

use std::path::{Path, PathBuf};

/// The file that marks a bundle's root: a JSON manifest (each file with its sha256, the
/// commit it was built from).
pub const MARKER: &str = "ab-bundle.json";

/// The bundle root this process runs from: the folder of the running binary when it holds
/// [`MARKER`], else None (a workspace, or a binary copied elsewhere).
///
/// Errors: the folder holds part of a bundle (`lib/libggml-base.so.0`, `lib/libab_probe.so`
/// or `cabi-tests/` beside the binary) but no manifest that is a file. Such a bundle was copied in part; were
/// it taken for a binary copied elsewhere, the tools would look for a workspace and run its
/// libraries instead of the bundle's.
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
fn has_bundle_shape(dir: &Path) -> bool {
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

/// The files every bundle holds, as its manifest names them.
pub const CORE_FILES: &[&str] = &["ab", "bench", "lib/libggml-base.so.0", "lib/libab_probe.so"];

/// Checks the bundle at `root` against its manifest: every file [`MARKER`] lists must be
/// there with its size (bytes) and sha256. Files the manifest does not list (what the tools
/// wrote under `target/`) are not looked at. About 40 MiB are hashed, a tenth of a second.
///
/// Errors: the manifest cannot be read or parsed, or files are missing or changed; the
/// message names the first few and says how to get a whole bundle again. A bundle copied in
/// part, or a library replaced in it, would otherwise run under the name of the commit the
/// manifest gives.
pub fn verify(root: &Path) -> Result<(), String> {
    let manifest = root.join(MARKER);
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| format!("reading {}: {e}", manifest.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", manifest.display()))?;
    let files = json["files"]
        .as_array()
        .ok_or_else(|| format!("{} has no `files` list", manifest.display()))?;
    // What every bundle holds: a manifest without these is not one `ab bundle` wrote.
    for core in CORE_FILES {
        if !files.iter().any(|f| f["path"].as_str() == Some(core)) {
            return Err(format!(
                "{} does not list {core}, which every bundle holds",
                manifest.display()
            ));
        }
    }
    let mut bad = Vec::new();
    for f in files {
        let (Some(path), Some(bytes), Some(sha)) = (
            f["path"].as_str(),
            f["bytes"].as_u64(),
            f["sha256"].as_str(),
        ) else {
            return Err(format!(
                "{}: an entry without path, bytes and sha256: {f}",
                manifest.display()
            ));
        };
        let inside = Path::new(path)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !inside {
            return Err(format!(
                "{}: the entry {path:?} is not a path inside the bundle",
                manifest.display()
            ));
        }
        let file = root.join(path);
        let found = match std::fs::metadata(&file) {
            Err(_) => Some("missing".to_string()),
            Ok(m) if !m.is_file() => Some("not a regular file".to_string()),
            Ok(m) if m.len() != bytes => {
                Some(format!("{} bytes, the manifest says {bytes}", m.len()))
            }
            Ok(_) => match filehash::sha256_file(&file) {
                Err(e) => Some(format!("unreadable: {e}")),
                Ok(h) if h != sha => Some(format!("sha256 {h}, the manifest says {sha}")),
                Ok(_) => None,
            },
        };
        if let Some(why) = found {
            bad.push(format!("{path}: {why}"));
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    let more = bad.len().saturating_sub(3);
    bad.truncate(3);
    Err(format!(
        "the bundle at {} does not match its manifest {MARKER}: {}{}; unpack it again from its \
         .tar.gz, or make a new one with `ab bundle` in a workspace",
        root.display(),
        bad.join("; "),
        if more > 0 {
            format!(" (and {more} more)")
        } else {
            String::new()
        }
    ))
}

/// Takes the lock of the folder `dir` (creating it): [`lock_file`] of `dir/.lock`.
///
/// Two harness processes writing one folder (two jobs from one bundle, or an `ab exec` of an
/// arm a running `ab ab` uses) would replace each other's library copies and reports while
/// their programs run.
pub fn lock_dir(dir: &Path) -> Result<std::fs::File, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    lock_file(&dir.join(".lock"), dir)
}

/// Takes an exclusive `flock` on the file `path` (created if missing; a symbolic link or
/// anything but a regular file is refused, so no other file is written), held until the
/// returned file is dropped or the process ends (child processes do not inherit it). The
/// file then holds the holder's pid and command line, for the message a second process gets.
/// `what` is the folder or file the lock guards, as the message names it.
///
/// Errors: the lock is held by another process (the message names it and `what`), or the
/// file cannot be opened.
pub fn lock_file(path: &Path, what: &Path) -> Result<std::fs::File, String> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => format!(
                "the lock {} is a symbolic link, which it must not be: remove it",
                path.display()
            ),
            _ => format!("opening the lock {}: {e}", path.display()),
        })?;
    // A regular file of its own: the holder's line is written into it, and must not land in
    // a file it shares its data with (a hard link).
    let own = file
        .metadata()
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.is_file() && m.nlink() == 1
        })
        .unwrap_or(false);
    if !own {
        return Err(format!(
            "the lock {} is not a regular file of its own (a folder, a device or a hard \
             link): remove it",
            path.display()
        ));
    }
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(format!(
                "{} is in use by another harness process ({}): wait for it to end, or run this \
                 one from another copy of the bundle or workspace",
                what.display(),
                holder.trim()
            ));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(format!("locking {}: {e}", path.display()))
        }
    }
    let args: Vec<String> = std::env::args().collect();
    let me = format!("pid {}: {}", std::process::id(), args.join(" "));
    // The holder's name is a courtesy to the next process: failing to write it loses nothing.
    let _ = file
        .set_len(0)
        .and_then(|_| file.rewind())
        .and_then(|_| file.write_all(me.as_bytes()));
    Ok(file)
}

/// Makes the process `cmd` starts get SIGTERM when the thread that starts it ends: the
/// harness's children go when it goes, even killed by a signal no cleanup of ours sees
/// (SIGKILL). Such a child would go on using an arm's folder whose lock has passed to the
/// next job, or keep a port. Start the child from a thread that outlives it (one that waits
/// for it). Only the child itself is covered, not what it starts in turn.
pub fn die_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure only calls prctl, which is
    // async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Refuses a path the dynamic loader would split when it reads `var`: `LD_LIBRARY_PATH` is
/// split at `:` and `;`, `LD_PRELOAD` at `:` and white space. Such a path (a bundle under a
/// folder named with a space, say) would make every run load the wrong files and fail its
/// proof for a reason the proof cannot name.
///
/// Errors: the message names the path, the character and the variable.
pub fn check_loader_path(var: &str, path: &Path) -> Result<(), String> {
    let seps: &[char] = if var == "LD_PRELOAD" {
        &[':', ' ', '\t', '\n']
    } else {
        &[':', ';']
    };
    let text = path.to_string_lossy();
    match text.chars().find(|c| seps.contains(c)) {
        Some(c) => Err(format!(
            "{} contains {c:?}, which the dynamic loader splits {var} at: move the workspace (or \
             the bundle) to a path without it",
            path.display()
        )),
        None => Ok(()),
    }
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

    #[test]
    fn paths_the_loader_would_split_are_refused_with_their_variable() {
        assert!(check_loader_path("LD_PRELOAD", Path::new("/w/target/probe.so")).is_ok());
        let e = check_loader_path("LD_PRELOAD", Path::new("/tmp/w s/probe.so")).unwrap_err();
        assert!(
            e.contains("/tmp/w s/probe.so") && e.contains("LD_PRELOAD"),
            "{e}"
        );
        assert!(check_loader_path("LD_PRELOAD", Path::new("/tmp/a:b/p.so")).is_err());
        // a space is fine in LD_LIBRARY_PATH; its separators are ':' and ';'
        assert!(check_loader_path("LD_LIBRARY_PATH", Path::new("/tmp/w s/lib")).is_ok());
        for bad in ["/tmp/a:b/lib", "/tmp/a;b/lib"] {
            let e = check_loader_path("LD_LIBRARY_PATH", Path::new(bad)).unwrap_err();
            assert!(e.contains("LD_LIBRARY_PATH") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn a_bundle_is_checked_against_its_manifest() {
        let d = std::env::temp_dir().join(format!("bundle-verify-{}", std::process::id()));
        std::fs::create_dir_all(d.join("lib")).unwrap();
        std::fs::write(d.join("lib/libggml-base.so.0"), b"base").unwrap();
        std::fs::write(d.join("ab"), b"ab").unwrap();
        std::fs::write(d.join("bench"), b"bench").unwrap();
        std::fs::write(d.join("lib/libab_probe.so"), b"probe").unwrap();
        let entry = |p: &str, bytes: &[u8]| serde_json::json!({"path": p, "bytes": bytes.len(), "sha256": filehash::sha256_hex(bytes)});
        let core = [
            entry("ab", b"ab"),
            entry("bench", b"bench"),
            entry("lib/libggml-base.so.0", b"base"),
            entry("lib/libab_probe.so", b"probe"),
        ];
        let with = |extra: &[serde_json::Value]| {
            let mut files = core.to_vec();
            files.extend_from_slice(extra);
            let m = serde_json::json!({"commit": "x", "files": files});
            std::fs::write(d.join(MARKER), m.to_string()).unwrap();
        };
        with(&[]);
        assert_eq!(verify(&d), Ok(()));
        // A manifest that leaves out a core file, names a path outside the bundle, or lists
        // something that is not a regular file (a device would be read for ever).
        std::fs::write(d.join(MARKER), r#"{"files": []}"#).unwrap();
        assert!(verify(&d).unwrap_err().contains("does not list ab"));
        for outside in ["/etc/hostname", "../x", "lib/../../x"] {
            with(&[serde_json::json!({"path": outside, "bytes": 0, "sha256": "0"})]);
            let e = verify(&d).unwrap_err();
            assert!(e.contains("not a path inside the bundle"), "{e}");
        }
        std::fs::create_dir_all(d.join("sub")).unwrap();
        with(&[serde_json::json!({"path": "sub", "bytes": 4096, "sha256": "0"})]);
        assert!(verify(&d).unwrap_err().contains("sub: not a regular file"));
        with(&[]);
        assert_eq!(verify(&d), Ok(()));
        // Files the manifest does not list (the tools' output) are not looked at.
        std::fs::create_dir_all(d.join("target")).unwrap();
        std::fs::write(d.join("target/report.json"), b"{}").unwrap();
        assert_eq!(verify(&d), Ok(()));
        // A library replaced with one of the same size.
        std::fs::write(d.join("lib/libggml-base.so.0"), b"BASE").unwrap();
        let e = verify(&d).unwrap_err();
        assert!(
            e.contains("lib/libggml-base.so.0: sha256 ") && e.contains("the manifest says"),
            "{e}"
        );
        // A missing file, and one of another size: both named.
        std::fs::remove_file(d.join("ab")).unwrap();
        std::fs::write(d.join("lib/libggml-base.so.0"), b"based").unwrap();
        let e = verify(&d).unwrap_err();
        assert!(e.contains("ab: missing"), "{e}");
        assert!(
            e.contains("lib/libggml-base.so.0: 5 bytes, the manifest says 4"),
            "{e}"
        );
        std::fs::write(d.join(MARKER), "not json").unwrap();
        assert!(verify(&d).unwrap_err().contains("parsing"));
        // Without its manifest the folder still has a bundle's shape.
        std::fs::create_dir_all(d.join("cabi-tests")).unwrap();
        assert!(has_bundle_shape(&d));
        std::fs::remove_dir_all(d.join("cabi-tests")).unwrap();
        assert!(has_bundle_shape(&d), "lib/ alone is a part of a bundle");
        std::fs::remove_dir_all(d.join("lib")).unwrap();
        assert!(!has_bundle_shape(&d));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_folder_has_one_holder_at_a_time() {
        let d = std::env::temp_dir().join(format!("bundle-lock-{}", std::process::id()));
        let held = lock_dir(&d).unwrap();
        // flock conflicts between two opens of the file, in one process as in two.
        let e = lock_dir(&d).unwrap_err();
        assert!(e.contains("in use by another harness process"), "{e}");
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(held);
        let again = lock_dir(&d).unwrap();
        drop(again);
        // A lock that is a link to another file is refused, and that file left as it was.
        let other = d.join("precious");
        std::fs::write(&other, "kept").unwrap();
        std::fs::remove_file(d.join(".lock")).unwrap();
        std::os::unix::fs::symlink(&other, d.join(".lock")).unwrap();
        let e = lock_dir(&d).unwrap_err();
        assert!(e.contains("is a symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "kept");
        std::fs::remove_file(d.join(".lock")).unwrap();
        std::fs::hard_link(&other, d.join(".lock")).unwrap();
        let e = lock_dir(&d).unwrap_err();
        assert!(e.contains("hard link"), "{e}");
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "kept");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
