//! The library store: every `libggml-base` the harness builds or is given, kept by content
//! under `target/ab/store/<sha256>/libggml-base.so.0`, so that an arm can be named by its
//! sha256 (or a unique prefix of one) long after the file it came from was rebuilt or
//! deleted, as the harness's users name them. Beside each file, `source.txt` records the
//! paths it was seen at, one a line.
//!
//! A stored file is made read-only (mode 0444) so that a slip does not change it, and it is
//! checked against its name whenever it is used: [`resolve`] refuses an entry whose bytes no
//! longer hash to its folder's name, and [`keep`] replaces such an entry with a verified copy
//! of the library the next time it is seen.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The mode of a stored file: read-only for everyone.
const STORED_MODE: u32 = 0o444;

/// The store's folder under the harness's output folder.
pub fn dir(ab_dir: &Path) -> PathBuf {
    ab_dir.join("store")
}

/// Keeps `file` (whose sha256 is `sha256`) in the store, once; records `file`'s path.
/// Returns the stored copy.
pub fn keep(ab_dir: &Path, file: &Path, sha256: &str) -> Result<PathBuf> {
    keep_seen_at(ab_dir, file, sha256, file)
}

/// [`keep`] for a checked copy `file` of a library first seen at `seen_at` (the path recorded):
/// the bench copies each arm before it runs, and stores that copy, which cannot have been
/// rebuilt since it was hashed. An entry already there is hashed first: one whose bytes do not
/// hash to `sha256` (changed after it was stored, or put there by hand) is replaced, so the
/// store repairs itself. The stored file is read-only (mode 0444). Safe against another
/// process storing the same library at the same time: each call writes, checks and makes
/// read-only a temporary file of its own, then renames it onto the entry (which replaces a
/// read-only file too); whichever rename lands last stays (the contents are the same).
pub fn keep_seen_at(ab_dir: &Path, file: &Path, sha256: &str, seen_at: &Path) -> Result<PathBuf> {
    let d = dir(ab_dir).join(sha256);
    let stored = d.join("libggml-base.so.0");
    let intact = |p: &Path| p.is_file() && filehash::sha256_file(p).is_ok_and(|h| h == sha256);
    if !intact(&stored) {
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        // Unique to this call: process id and a per-process count.
        static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = d.join(format!(".part.{}.{n}", std::process::id()));
        let copy = || -> Result<()> {
            std::fs::copy(file, &tmp)
                .with_context(|| format!("copying {} into the store", file.display()))?;
            let copied = filehash::sha256_file(&tmp)
                .with_context(|| format!("hashing {} in the store", tmp.display()))?;
            if copied != sha256 {
                bail!(
                    "{} changed while it was copied into the store",
                    file.display()
                );
            }
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(STORED_MODE))
                .with_context(|| format!("making {} read-only", tmp.display()))?;
            std::fs::rename(&tmp, &stored)
                .with_context(|| format!("moving {} to {}", tmp.display(), stored.display()))
        };
        let copied = copy();
        let _ = std::fs::remove_file(&tmp);
        // Another process may have stored the same bytes meanwhile: that is success too.
        if let Err(e) = copied {
            if !intact(&stored) {
                return Err(e);
            }
        }
    }
    let line = seen_at.display().to_string();
    let sources = d.join("source.txt");
    let seen = std::fs::read_to_string(&sources).unwrap_or_default();
    if !seen.lines().any(|l| l == line) {
        // Appended, not rewritten: two processes recording at once keep both lines.
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&sources)
            .with_context(|| format!("opening {}", sources.display()))?;
        writeln!(f, "{line}").with_context(|| format!("writing {}", sources.display()))?;
    }
    Ok(stored)
}

/// What `--a`/`--b` name, as the user gave it: an existing file (a relative path taken from
/// the folder they called the harness from, [`bundle::caller_path`]); otherwise a sha256 or a
/// prefix of one (at least 6 hex digits) that exactly one stored library has. Each stored
/// library the name matches is hashed: one whose file does not hash to its folder's name
/// (changed after it was stored, or an entry made by hand) does not count, and when no intact
/// one is left the error names each such entry, the sha256 it should have and the one it has.
/// Fails naming what the store holds when nothing, or more than one, matches.
pub fn resolve(ab_dir: &Path, spec: &Path) -> Result<PathBuf> {
    // Resolved here, not when the arguments are parsed: a hash prefix is no path.
    let file = bundle::caller_path(spec);
    // A file, not any entry: a folder named like a hash prefix must not hide the library.
    if file.is_file() {
        return Ok(file);
    }
    let s = spec.to_string_lossy().to_ascii_lowercase();
    let is_hash = s.len() >= 6 && s.len() <= 64 && s.chars().all(|c| c.is_ascii_hexdigit());
    if !is_hash {
        bail!(
            "{} is neither a file nor a sha256 (or a prefix of at least 6 hex digits)",
            file.display()
        );
    }
    let all = list(ab_dir)?;
    let mut hits: Vec<&Stored> = Vec::new();
    // Entries the name matches whose file hashes otherwise: (entry, what it hashes to).
    let mut broken: Vec<(&Stored, String)> = Vec::new();
    for e in all.iter().filter(|e| e.sha256.starts_with(&s)) {
        match filehash::sha256_file(&e.file) {
            Ok(h) if h == e.sha256 => hits.push(e),
            Ok(h) => broken.push((e, format!("has sha256 {h}"))),
            Err(err) => broken.push((e, format!("could not be read ({err})"))),
        }
    }
    match hits.as_slice() {
        [one] => Ok(one.file.clone()),
        [] if !broken.is_empty() => bail!(
            "{} is no file, and the stored libggml-base that {s} names is not the library its \
             entry is named for: {}; remove {} (the library is stored again, checked, the next \
             time the harness is given it or builds it)",
            file.display(),
            broken
                .iter()
                .map(|(e, has)| format!(
                    "{} should have sha256 {} but {has}",
                    e.file.display(),
                    e.sha256
                ))
                .collect::<Vec<_>>()
                .join("; "),
            broken
                .iter()
                .map(|(e, _)| dir(ab_dir).join(&e.sha256).display().to_string())
                .collect::<Vec<_>>()
                .join(" and ")
        ),
        [] => bail!(
            "{} is no file, and no stored libggml-base has a sha256 starting {s}; the store \
             ({}) holds {}",
            file.display(),
            dir(ab_dir).display(),
            if all.is_empty() {
                "nothing yet".to_string()
            } else {
                all.iter()
                    .map(|e| e.sha256[..12].to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
        many => bail!(
            "{s} is the start of {} stored sha256s ({}): give more digits",
            many.len(),
            many.iter()
                .map(|e| e.sha256.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// One library in the store.
pub struct Stored {
    pub sha256: String,
    pub file: PathBuf,
    /// The paths it was seen at.
    pub sources: Vec<String>,
}

/// Every library in the store, by sha256: each folder named by 64 lower-case hex digits that
/// holds a `libggml-base.so.0`. Cheap: the files are not hashed, so an entry whose file no
/// longer hashes to its name is listed too ([`resolve`] checks the entries it returns, and
/// [`keep`] repairs one when its library is seen again).
pub fn list(ab_dir: &Path) -> Result<Vec<Stored>> {
    let d = dir(ab_dir);
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&d) else {
        return Ok(out);
    };
    for e in entries {
        let e = e?;
        let sha256 = e.file_name().to_string_lossy().into_owned();
        let file = e.path().join("libggml-base.so.0");
        let named = sha256.len() == 64
            && sha256
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
        if named && file.is_file() {
            let sources = std::fs::read_to_string(e.path().join("source.txt"))
                .unwrap_or_default()
                .lines()
                .map(String::from)
                .collect();
            out.push(Stored {
                sha256,
                file,
                sources,
            });
        }
    }
    out.sort_by(|a, b| a.sha256.cmp(&b.sha256));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Several processes (threads here) storing the same new library at once all succeed,
    /// and the store holds it once, intact.
    #[test]
    fn concurrent_keeps_of_one_library_all_succeed() {
        let ab = std::env::temp_dir().join(format!("ab-store-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&ab);
        std::fs::create_dir_all(&ab).unwrap();
        let f = ab.join("lib.so");
        std::fs::write(&f, vec![7u8; 1 << 20]).unwrap();
        let h = filehash::sha256_file(&f).unwrap();
        for round in 0..20 {
            let _ = std::fs::remove_dir_all(dir(&ab));
            let results: Vec<Result<PathBuf>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..4).map(|_| s.spawn(|| keep(&ab, &f, &h))).collect();
                handles.into_iter().map(|t| t.join().unwrap()).collect()
            });
            for r in results {
                let stored = r.unwrap_or_else(|e| panic!("round {round}: {e:#}"));
                assert_eq!(filehash::sha256_file(&stored).unwrap(), h);
            }
            assert_eq!(list(&ab).unwrap().len(), 1);
        }
        std::fs::remove_dir_all(&ab).unwrap();
    }

    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let ab = std::env::temp_dir().join(format!("ab-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&ab);
        std::fs::create_dir_all(&ab).unwrap();
        ab
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    /// Whether this process bypasses file permissions (root, as in a container): then a
    /// read-only file can still be written, and only its mode can be checked.
    fn bypasses_permissions() -> bool {
        std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1).map(|euid| euid == "0"))
            .unwrap_or(true)
    }

    /// A stored file is read-only; one changed after it was stored (made writable again and a
    /// byte appended) is refused by name, with the sha256 it should have and the one it has,
    /// until `keep` of the library replaces it (over the read-only file) with a checked copy.
    #[test]
    fn a_changed_entry_is_refused_and_keep_repairs_it() {
        let ab = scratch("changed");
        let f = ab.join("lib.so");
        std::fs::write(&f, b"the library").unwrap();
        let h = filehash::sha256_file(&f).unwrap();
        let stored = keep(&ab, &f, &h).unwrap();
        assert_eq!(stored, dir(&ab).join(&h).join("libggml-base.so.0"));
        assert_eq!(mode(&stored), 0o444);
        if !bypasses_permissions() {
            let w = std::fs::OpenOptions::new().append(true).open(&stored);
            assert!(w.is_err(), "a stored file opened for writing");
        }
        assert_eq!(resolve(&ab, Path::new(&h[..10])).unwrap(), stored);

        std::fs::set_permissions(&stored, std::fs::Permissions::from_mode(0o644)).unwrap();
        {
            use std::io::Write;
            let mut w = std::fs::OpenOptions::new()
                .append(true)
                .open(&stored)
                .unwrap();
            w.write_all(b"!").unwrap();
        }
        // Read-only again, so that the repair below renames over a read-only file.
        std::fs::set_permissions(&stored, std::fs::Permissions::from_mode(0o444)).unwrap();
        let changed = filehash::sha256_file(&stored).unwrap();
        assert_ne!(changed, h);
        for spec in [&h[..10], h.as_str()] {
            let e = resolve(&ab, Path::new(spec)).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "{} should have sha256 {h} but has sha256 {changed}",
                    stored.display()
                )),
                "{e}"
            );
            assert!(
                e.contains(&format!("remove {}", dir(&ab).join(&h).display())),
                "{e}"
            );
        }
        // Listing stays cheap: the entry is still listed.
        assert_eq!(list(&ab).unwrap().len(), 1);

        assert_eq!(keep(&ab, &f, &h).unwrap(), stored);
        assert_eq!(filehash::sha256_file(&stored).unwrap(), h);
        assert_eq!(mode(&stored), 0o444);
        assert_eq!(resolve(&ab, Path::new(&h[..10])).unwrap(), stored);
        // One source line still, and no temporary file left.
        let entry = dir(&ab).join(&h);
        assert_eq!(
            std::fs::read_to_string(entry.join("source.txt")).unwrap(),
            format!("{}\n", f.display())
        );
        let mut names: Vec<_> = std::fs::read_dir(&entry)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["libggml-base.so.0", "source.txt"]);
        // The store, read-only files and all, can be removed.
        std::fs::remove_dir_all(&ab).unwrap();
    }

    /// A folder made by hand, named like a sha256, holding some other file: refused when it
    /// is the only entry a name matches, ignored when an intact entry shares the prefix.
    #[test]
    fn a_hand_made_entry_is_refused() {
        let ab = scratch("hand-made");
        let f = ab.join("lib.so");
        std::fs::write(&f, b"a real library").unwrap();
        let h = filehash::sha256_file(&f).unwrap();
        let stored = keep(&ab, &f, &h).unwrap();
        // Same first 8 digits as the real one, then f's (or 0s, were the real one all f).
        let tail = if h[8..].bytes().all(|c| c == b'f') {
            "0"
        } else {
            "f"
        };
        let fake = format!("{}{}", &h[..8], tail.repeat(56));
        let fake_file = dir(&ab).join(&fake).join("libggml-base.so.0");
        std::fs::create_dir_all(fake_file.parent().unwrap()).unwrap();
        std::fs::write(&fake_file, b"some other file").unwrap();
        let other = filehash::sha256_hex(b"some other file");
        assert_eq!(list(&ab).unwrap().len(), 2);

        let e = resolve(&ab, Path::new(&fake[..20]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!(
                "{} should have sha256 {fake} but has sha256 {other}",
                fake_file.display()
            )),
            "{e}"
        );
        assert!(
            e.contains(&format!("remove {}", dir(&ab).join(&fake).display())),
            "{e}"
        );
        assert!(!e.contains(&h), "the intact entry is not named: {e}");
        // The prefix both share names the intact one: the other is no candidate.
        assert_eq!(resolve(&ab, Path::new(&h[..8])).unwrap(), stored);
        assert_eq!(resolve(&ab, Path::new(&h)).unwrap(), stored);
        // A folder whose name is not lower-case hex is no entry.
        let odd = dir(&ab).join("g".repeat(64));
        std::fs::create_dir_all(&odd).unwrap();
        std::fs::write(odd.join("libggml-base.so.0"), b"x").unwrap();
        assert_eq!(list(&ab).unwrap().len(), 2);
        std::fs::remove_dir_all(&ab).unwrap();
    }

    /// Several processes (threads here) seeing the same broken entry at once all repair it,
    /// and each gets the intact library.
    #[test]
    fn concurrent_keeps_repair_a_broken_entry() {
        let ab = scratch("repair-race");
        let f = ab.join("lib.so");
        std::fs::write(&f, vec![9u8; 1 << 20]).unwrap();
        let h = filehash::sha256_file(&f).unwrap();
        let stored = dir(&ab).join(&h).join("libggml-base.so.0");
        for round in 0..10 {
            let _ = std::fs::remove_dir_all(dir(&ab));
            std::fs::create_dir_all(stored.parent().unwrap()).unwrap();
            std::fs::write(&stored, b"broken").unwrap();
            std::fs::set_permissions(&stored, std::fs::Permissions::from_mode(0o444)).unwrap();
            let results: Vec<Result<PathBuf>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..4).map(|_| s.spawn(|| keep(&ab, &f, &h))).collect();
                handles.into_iter().map(|t| t.join().unwrap()).collect()
            });
            for r in results {
                let got = r.unwrap_or_else(|e| panic!("round {round}: {e:#}"));
                assert_eq!(filehash::sha256_file(&got).unwrap(), h);
            }
            assert_eq!(mode(&stored), 0o444);
            assert_eq!(resolve(&ab, Path::new(&h[..8])).unwrap(), stored);
        }
        std::fs::remove_dir_all(&ab).unwrap();
    }

    #[test]
    fn kept_files_are_named_by_unique_prefixes_only() {
        let ab = std::env::temp_dir().join(format!("ab-store-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&ab);
        std::fs::create_dir_all(&ab).unwrap();
        let (f1, f2) = (ab.join("one.so"), ab.join("two.so"));
        std::fs::write(&f1, b"one").unwrap();
        std::fs::write(&f2, b"two").unwrap();
        let (h1, h2) = (
            filehash::sha256_file(&f1).unwrap(),
            filehash::sha256_file(&f2).unwrap(),
        );
        let s1 = keep(&ab, &f1, &h1).unwrap();
        keep(&ab, &f2, &h2).unwrap();
        keep(&ab, &f1, &h1).unwrap(); // twice: one entry, one source line
        std::fs::remove_file(&f1).unwrap(); // the store outlives the original
        assert_eq!(resolve(&ab, Path::new(&h1[..8])).unwrap(), s1);
        assert_eq!(resolve(&ab, Path::new(&h1.to_uppercase())).unwrap(), s1);
        assert_eq!(list(&ab).unwrap().len(), 2);
        assert_eq!(
            list(&ab)
                .unwrap()
                .iter()
                .find(|e| e.sha256 == h1)
                .unwrap()
                .sources
                .len(),
            1
        );
        // A folder in the caller's folder named like the prefix does not hide the library.
        let caller = bundle::caller_dir().expect("the current directory");
        let decoy = caller.join(&h1[..8]);
        std::fs::create_dir(&decoy).unwrap();
        let through_decoy = resolve(&ab, Path::new(&h1[..8]));
        std::fs::remove_dir(&decoy).unwrap();
        assert_eq!(through_decoy.unwrap(), s1);
        let e = resolve(&ab, Path::new("abcdef0")).unwrap_err().to_string();
        assert!(
            e.contains("no stored libggml-base has a sha256 starting abcdef0"),
            "{e}"
        );
        // The message names the file it looked for first.
        assert!(
            e.contains(&caller.join("abcdef0").display().to_string()),
            "{e}"
        );
        let e = resolve(&ab, Path::new("xyz")).unwrap_err().to_string();
        assert!(e.contains("neither a file nor a sha256"), "{e}");
        // an existing path wins over the store
        assert_eq!(resolve(&ab, &f2).unwrap(), f2);
        std::fs::remove_dir_all(&ab).unwrap();
    }

    /// A relative file is the one in the caller's folder (the test's current directory, as
    /// for a binary run directly), returned absolute; a missing one is named that way too.
    #[test]
    fn a_relative_file_is_taken_from_the_callers_folder() {
        let caller = bundle::caller_dir().expect("the current directory");
        let name = std::fs::read_dir(caller)
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| e.path().is_file())
            .expect("a file in the current directory")
            .file_name();
        let ab = Path::new("/nonexistent-ab-dir");
        assert_eq!(resolve(ab, Path::new(&name)).unwrap(), caller.join(&name));
        let e = resolve(ab, Path::new("no/such.so"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&caller.join("no/such.so").display().to_string()),
            "{e}"
        );
    }
}
