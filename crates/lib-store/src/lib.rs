//! The library store: every `libggml-base` the harness builds or is given, kept by content
//! under `target/ab/store/<sha256>/libggml-base.so.0`, so that an arm can be named by its
//! sha256 (or a unique prefix of one) long after the file it came from was rebuilt or
//! deleted, as the harness's users name them. Beside each file, `source.txt` records the
//! paths it was seen at, one a line.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The store's folder under the harness's output folder.
pub fn dir(ab_dir: &Path) -> PathBuf {
    ab_dir.join("store")
}

/// Keeps `file` (whose sha256 is `sha256`) in the store, once; records `file`'s path.
/// Returns the stored copy.
pub fn keep(ab_dir: &Path, file: &Path, sha256: &str) -> Result<PathBuf> {
    let d = dir(ab_dir).join(sha256);
    let stored = d.join("libggml-base.so.0");
    if !stored.is_file() {
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        let tmp = d.join(".part");
        std::fs::copy(file, &tmp)
            .with_context(|| format!("copying {} into the store", file.display()))?;
        let copied = filehash::sha256_file(&tmp)
            .with_context(|| format!("hashing {} in the store", tmp.display()))?;
        if copied != sha256 {
            let _ = std::fs::remove_file(&tmp);
            bail!(
                "{} changed while it was copied into the store",
                file.display()
            );
        }
        std::fs::rename(&tmp, &stored)?;
    }
    let sources = d.join("source.txt");
    let line = file.display().to_string();
    let seen = std::fs::read_to_string(&sources).unwrap_or_default();
    if !seen.lines().any(|l| l == line) {
        std::fs::write(&sources, seen + &line + "\n")?;
    }
    Ok(stored)
}

/// What `--a`/`--b` name: an existing file as it is; otherwise a sha256 or a prefix of one
/// (at least 6 hex digits) that exactly one stored library has. Fails naming what the store
/// holds when nothing, or more than one, matches.
pub fn resolve(ab_dir: &Path, spec: &Path) -> Result<PathBuf> {
    if spec.exists() {
        return Ok(spec.to_path_buf());
    }
    let s = spec.to_string_lossy().to_ascii_lowercase();
    let is_hash = s.len() >= 6 && s.len() <= 64 && s.chars().all(|c| c.is_ascii_hexdigit());
    if !is_hash {
        bail!(
            "{} is neither a file nor a sha256 (or a prefix of at least 6 hex digits)",
            spec.display()
        );
    }
    let all = list(ab_dir)?;
    let hits: Vec<&Stored> = all.iter().filter(|e| e.sha256.starts_with(&s)).collect();
    match hits.as_slice() {
        [one] => Ok(one.file.clone()),
        [] => bail!(
            "no stored libggml-base has a sha256 starting {s}; the store ({}) holds {}",
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

/// Every library in the store, by sha256.
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
        if sha256.len() == 64 && file.is_file() {
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
        let e = resolve(&ab, Path::new("abcdef0")).unwrap_err().to_string();
        assert!(
            e.contains("no stored libggml-base has a sha256 starting abcdef0"),
            "{e}"
        );
        let e = resolve(&ab, Path::new("xyz")).unwrap_err().to_string();
        assert!(e.contains("neither a file nor a sha256"), "{e}");
        // an existing path wins over the store
        assert_eq!(resolve(&ab, &f2).unwrap(), f2);
        std::fs::remove_dir_all(&ab).unwrap();
    }
}
