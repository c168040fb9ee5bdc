//! The two arms of a comparison: each is one `libggml-base.so.0` file, copied into a
//! directory of its own that goes first on `LD_LIBRARY_PATH` when a process runs that arm.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::fs;
use std::path::{Path, PathBuf};

/// One arm: where its library came from and where the copy that processes load lives.
#[derive(Debug, Clone, Serialize)]
pub struct Arm {
    /// `"A"` (the baseline, normally stock) or `"B"` (the candidate, normally ours).
    pub key: &'static str,
    /// Human label: `stock`, `ours`, or `stock (as B)` when ours was not found.
    pub label: String,
    /// The file the user named (or the default), before copying.
    pub source: PathBuf,
    /// Directory holding the copy named `libggml-base.so.0`; put first on `LD_LIBRARY_PATH`.
    pub dir: PathBuf,
    /// `<dir>/libggml-base.so.0`: the exact file a correct run maps.
    pub file: PathBuf,
    /// sha256 of `file`.
    pub sha256: String,
}

/// The file an arm option (`--a`, `--b`) names: an existing file as it is; otherwise a sha256,
/// or a unique prefix of 6 or more hex digits, of a library in the harness's store
/// (`<target>/ab/store`, which `ab` and the bench fill), as `ab ab --a` takes it. Errors name
/// what the store holds when nothing or more than one library matches.
pub fn named(target: &Path, spec: &Path) -> Result<PathBuf> {
    lib_store::resolve(&target.join("ab"), spec)
}

/// Keeps each arm's library in the harness's store under `target` (once per content), so that
/// a later run, of the bench or of `ab`, can name it by its sha256 after the file it came from
/// was rebuilt. A library named from the store itself is not recorded again.
pub fn keep(target: &Path, arms: &[&Arm]) -> Result<()> {
    let ab_dir = target.join("ab");
    let store = lib_store::dir(&ab_dir);
    let store = store.canonicalize().unwrap_or(store);
    for arm in arms {
        let source = arm
            .source
            .canonicalize()
            .unwrap_or_else(|_| arm.source.clone());
        if !source.starts_with(&store) {
            // The arm's checked copy, not the source, which a build may have replaced since.
            lib_store::keep_seen_at(&ab_dir, &arm.file, &arm.sha256, &source)?;
        }
    }
    Ok(())
}

/// [`keep`], with a failure only reported: a run does not need the store, so an unwritable
/// one costs a warning, not the run.
pub fn keep_or_warn(target: &Path, arms: &[&Arm]) {
    if let Err(e) = keep(target, arms) {
        crate::progress(&format!(
            "warning: the arms were not kept in the store: {e:#}"
        ));
    }
}

/// Refuses any source (arm key, file) that lies in the arms' folder `root` (created if
/// missing), whose files a run replaces: preparing arm A would overwrite a file arm B names
/// there. Call it with both arms before preparing either.
pub fn check_sources(root: &Path, sources: &[(&str, &Path)]) -> Result<()> {
    fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let root_resolved = root.canonicalize()?;
    for (key, source) in sources {
        let inside = source
            .canonicalize()
            .map(|s| s.starts_with(&root_resolved))
            .unwrap_or(false);
        if inside {
            bail!(
                "{} library {} lies in the arms' folder {}, whose files this run replaces: \
                 copy it elsewhere first",
                key,
                source.display(),
                root.display()
            );
        }
    }
    Ok(())
}

impl Arm {
    /// Copies `source` to `<root>/<key>/libggml-base.so.0` (replacing an older copy) through
    /// a temporary file and a rename, and checks the copy hashes like the source. Errors when
    /// `source` does not exist, is an arm copy of `root` itself (the copy would replace the
    /// file it reads, or another arm's), cannot be copied, or the copy differs.
    pub fn prepare(key: &'static str, label: String, source: &Path, root: &Path) -> Result<Arm> {
        if !source.is_file() {
            bail!(
                "{} library {} {}",
                key,
                source.display(),
                if source.exists() {
                    "is not a file"
                } else {
                    "does not exist"
                }
            );
        }
        let resolved = source.canonicalize()?;
        check_sources(root, &[(key, source)])?;
        let sha256 = pins::sha256_file(&resolved).map_err(|e| anyhow::anyhow!("{e}"))?;
        let dir = root.join(key.to_lowercase());
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let file = dir.join("libggml-base.so.0");
        let part = dir.join(".libggml-base.so.0.part");
        // A part left by a killed run may be read-only (copied from the store, whose files
        // are): copying onto it would fail for a user other than root.
        let _ = fs::remove_file(&part);
        fs::copy(&resolved, &part)
            .with_context(|| format!("copying {} to {}", source.display(), part.display()))?;
        fs::rename(&part, &file).with_context(|| format!("installing {}", file.display()))?;
        let file = file.canonicalize()?;
        let dir = dir.canonicalize()?;
        let copied = pins::sha256_file(&file).map_err(|e| anyhow::anyhow!("{e}"))?;
        if copied != sha256 {
            bail!(
                "{key}: the copy {} hashes {copied}, the source {} hashes {sha256}",
                file.display(),
                resolved.display()
            );
        }
        Ok(Arm {
            key,
            label,
            // Absolute, so the report names the file wherever it is read from; links are kept
            // as named (the sha256 is of the file they lead to).
            source: std::path::absolute(source)?,
            dir,
            file,
            sha256,
        })
    }

    /// `LD_LIBRARY_PATH` value for a process of this arm: the arm's directory first, then
    /// `rest` (the stock build's library directory, for everything but libggml-base).
    pub fn ld_library_path(&self, rest: &Path) -> String {
        format!("{}:{}", self.dir.display(), rest.display())
    }

    /// Checks that `mapped` (a path a process reported it loaded) is this arm's file.
    pub fn check_mapped(&self, mapped: &str, what: &str) -> Result<()> {
        let mapped_path = Path::new(mapped);
        let same = mapped_path
            .canonicalize()
            .map(|p| p == self.file)
            .unwrap_or(false);
        if !same {
            bail!(
                "{what} for arm {} mapped {mapped}, expected {}",
                self.key,
                self.file.display()
            );
        }
        Ok(())
    }
}

/// The machine the figures come from.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// `lscpu` "Model name".
    pub cpu: String,
    /// Online CPUs (`nproc`).
    pub cores: usize,
    /// `uname -sr`.
    pub kernel: String,
    /// Total memory, GiB.
    pub mem_gib: f64,
}

impl Machine {
    /// Reads the CPU model from `/proc/cpuinfo`, the core count from the OS, the kernel from
    /// `/proc/sys/kernel`, memory from `/proc/meminfo`. Missing items read as "?" / 0.
    pub fn probe() -> Machine {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "?".into());
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0);
        let read = |p: &str| fs::read_to_string(p).unwrap_or_default().trim().to_string();
        let kernel = format!(
            "{} {}",
            read("/proc/sys/kernel/ostype"),
            read("/proc/sys/kernel/osrelease")
        );
        let mem_gib = fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb / 1024.0 / 1024.0)
            .unwrap_or(0.0);
        Machine {
            cpu,
            cores,
            kernel,
            mem_gib,
        }
    }
}

/// The 1-minute load average, a noise indicator on a shared machine.
pub fn loadavg() -> f64 {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arm_is_a_checked_copy_and_never_one_of_the_arms_folder() {
        let d = std::env::temp_dir().join(format!("bench-arms-{}", std::process::id()));
        let root = d.join("arms");
        fs::create_dir_all(&d).unwrap();
        let lib = d.join("lib.so");
        fs::write(&lib, b"library bytes").unwrap();
        let a = Arm::prepare("A", "stock".into(), &lib, &root).unwrap();
        assert_eq!(
            a.file,
            root.join("a/libggml-base.so.0").canonicalize().unwrap()
        );
        assert_eq!(a.sha256, pins::sha256_file(&lib).unwrap());
        assert_eq!(fs::read(&a.file).unwrap(), b"library bytes");
        // The last run's copy named as an arm: refused, and left where it was.
        for key in ["A", "B"] {
            let e = Arm::prepare(key, "x".into(), &a.file, &root)
                .unwrap_err()
                .to_string();
            assert!(e.contains("lies in the arms' folder"), "{e}");
        }
        assert_eq!(fs::read(&a.file).unwrap(), b"library bytes");
        // Both sources are checked before either arm is installed: B naming A's copy is
        // refused although A's own source is fine.
        let e = check_sources(&root, &[("A", &lib), ("B", &a.file)])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("B library"), "{e}");
        assert!(check_sources(&root, &[("A", &lib), ("B", &lib)]).is_ok());
        fs::remove_dir_all(&d).unwrap();
    }

    /// An arm kept in the store can be named by a hash prefix once its file is gone; one
    /// named from the store is not recorded as its own source.
    #[test]
    fn kept_arms_are_named_by_hash_after_their_file_is_gone() {
        let d = std::env::temp_dir().join(format!("bench-arms-store-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        let target = d.join("target");
        fs::create_dir_all(&target).unwrap();
        let lib = d.join("libggml-base.so.0");
        fs::write(&lib, b"a library").unwrap();
        let a = Arm::prepare("A", "A".into(), &lib, &d.join("arms")).unwrap();
        keep(&target, &[&a]).unwrap();
        let lib_seen_at = lib.canonicalize().unwrap();
        fs::remove_file(&lib).unwrap();
        let named_file = named(&target, Path::new(&a.sha256[..8])).unwrap();
        assert_eq!(filehash::sha256_file(&named_file).unwrap(), a.sha256);
        let again = Arm::prepare("B", "B".into(), &named_file, &d.join("arms")).unwrap();
        keep(&target, &[&again]).unwrap();
        let stored = lib_store::list(&target.join("ab")).unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].sources, vec![lib_seen_at.display().to_string()]);
        let e = named(&target, Path::new("not-a-hash"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("neither a file nor a sha256"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }
}
