//! The swap: run a program of a llama.cpp build with a chosen `libggml-base` file.
//!
//! Design: each arm gets a folder `target/ab/arms/<arm>/lib/` holding a *copy* (not a link,
//! so the path the process maps names the arm) of the chosen file under the name
//! `libggml-base.so.0`, the SONAME every ggml library asks for. That folder goes first on
//! `LD_LIBRARY_PATH`, which the dynamic loader searches before a binary's `DT_RUNPATH` (the
//! stock build uses `DT_RUNPATH`; a `DT_RPATH` would beat it, which the proof catches).
//! `GGML_BACKEND_PATH` names an extra backend library when one is given.
//!
//! Every process of a run also gets the probe (`LD_PRELOAD=libab_probe.so`) and
//! `GGML_AB_PROBE_OUT=<run>.probe.jsonl`; the proof (see [`crate::proof`]) is read from there.

use crate::proc::{self, Finished, RunOpts, Watcher};
use crate::proof::{self, Proof};
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// One side of a comparison: the `libggml-base` file it runs with.
#[derive(Debug, Clone)]
pub struct Arm {
    /// The arm's name (`stock`, `ours`, `a`, `b`, ...), also its folder name.
    pub name: String,
    /// The file as the user named it.
    pub source: PathBuf,
    /// `source` with every link resolved.
    pub resolved: PathBuf,
    /// sha256 of the file.
    pub sha256: String,
    /// `target/ab/arms/<name>/lib`: first on `LD_LIBRARY_PATH`.
    pub lib_dir: PathBuf,
    /// `<lib_dir>/libggml-base.so.0`, the copy processes should map.
    pub lib_copy: PathBuf,
    /// Optional backend library for `GGML_BACKEND_PATH`, with its sha256.
    pub backend: Option<(PathBuf, String)>,
    /// A library preloaded after the probe: the C++ runtime the build's programs expect
    /// from their own libggml-base, when it carries one ([`crate::cxxrt`]).
    pub preload: Option<PathBuf>,
    /// The lock of `ab_dir/arms/<name>` ([`bundle::lock_dir`]), held while the arm lives:
    /// another harness process cannot replace its copy under a running program.
    pub _lock: Option<std::sync::Arc<std::fs::File>>,
}

impl Arm {
    /// Prepares the arm's folder under `ab_dir/arms/<name>/lib` with a verified copy of
    /// `file`. Fails when `file` is missing or the copy does not hash like the original.
    pub fn prepare(ab_dir: &Path, name: &str, file: &Path, backend: Option<&Path>) -> Result<Arm> {
        check_arm_name(name)?;
        if !file.is_file() {
            bail!("arm {name}: {} is not a file", file.display());
        }
        let resolved = file
            .canonicalize()
            .with_context(|| format!("resolving {}", file.display()))?;
        check_not_an_arm_copy(ab_dir, name, &resolved)?;
        let sha256 = pins::sha256_file(&resolved)?;
        let lib_dir = ab_dir.join("arms").join(name).join("lib");
        check_search_path("LD_LIBRARY_PATH", &lib_dir)?;
        let lock = bundle::lock_dir(&ab_dir.join("arms").join(name))
            .map_err(|e| anyhow::anyhow!("arm {name}: {e}"))?;
        std::fs::create_dir_all(&lib_dir)
            .with_context(|| format!("creating {}", lib_dir.display()))?;
        let lib_copy = lib_dir.join("libggml-base.so.0");
        let fresh = lib_copy.is_file()
            && pins::sha256_file(&lib_copy)
                .map(|s| s == sha256)
                .unwrap_or(false);
        if !fresh {
            let tmp = lib_dir.join(".libggml-base.so.0.part");
            // A part left by a killed run may be read-only (copied from the store, whose
            // files are): copying onto it would fail for a user other than root.
            let _ = std::fs::remove_file(&tmp);
            std::fs::copy(&resolved, &tmp)
                .with_context(|| format!("copying {} to {}", resolved.display(), tmp.display()))?;
            std::fs::rename(&tmp, &lib_copy)
                .with_context(|| format!("installing {}", lib_copy.display()))?;
            let copied = pins::sha256_file(&lib_copy)?;
            if copied != sha256 {
                bail!(
                    "arm {name}: copy {} hashes {copied}, original {} hashes {sha256}",
                    lib_copy.display(),
                    resolved.display()
                );
            }
        }
        let backend = match backend {
            Some(b) => {
                let b = b
                    .canonicalize()
                    .with_context(|| format!("backend {} not found", b.display()))?;
                let sha = pins::sha256_file(&b)?;
                Some((b, sha))
            }
            None => None,
        };
        Ok(Arm {
            name: name.to_string(),
            source: file.to_path_buf(),
            resolved,
            sha256,
            lib_dir,
            lib_copy,
            backend,
            preload: None,
            _lock: Some(std::sync::Arc::new(lock)),
        })
    }
}

/// Refuses `file` (resolved) when it lies under `ab_dir/arms`: the copy of an arm, which
/// preparing this arm or another would replace while it is read, so that the arm would run
/// another library than the one named. Call it for every arm of a job before preparing any.
pub fn check_not_an_arm_copy(ab_dir: &Path, name: &str, file: &Path) -> Result<()> {
    let arms = ab_dir.join("arms");
    let inside = arms
        .canonicalize()
        .map(|a| file.starts_with(a))
        .unwrap_or(false);
    if inside {
        bail!(
            "arm {name}: {} lies in {}, the arms' copies, which a job replaces: name the \
             original file, or its sha256 (`ab store`)",
            file.display(),
            arms.display()
        );
    }
    Ok(())
}

/// An arm's name is a folder under `target/ab/arms` and a word of the report: letters,
/// digits, `.`, `_` and `-`, not starting with `.` (so not empty, `..`, a path or anything
/// the dynamic loader's variables would split).
pub fn check_arm_name(name: &str) -> Result<()> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !plain {
        bail!(
            "arm name {name:?} is not a plain name (letters, digits, '.', '_' and '-', not \
             starting with '.'): it names the arm's folder under target/ab/arms"
        );
    }
    Ok(())
}

/// Refuses a path the dynamic loader would split when it reads `var`
/// ([`bundle::check_loader_path`]).
pub fn check_search_path(var: &str, path: &Path) -> Result<()> {
    bundle::check_loader_path(var, path).map_err(anyhow::Error::msg)
}

/// What to run in an arm.
pub struct Job<'a> {
    /// Short name of the run (used for file names and the report).
    pub name: &'a str,
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub timeout: Duration,
    /// Show the child's output live.
    pub echo: bool,
    /// Whether at least one process must map libggml-base (true for ggml programs).
    pub expect_base: bool,
    /// The folder the program runs in: the user's for `ab exec`, whose arguments they wrote
    /// from there; None for the harness's own runs, whose paths are absolute (they run where
    /// the harness does).
    pub dir: Option<&'a Path>,
}

/// A run's end and its proof.
pub struct Outcome {
    pub finished: Finished,
    pub proof: Proof,
    /// The run's combined log (`stdout` then `stderr`).
    pub log: PathBuf,
    /// The probe's raw records.
    pub probe_file: PathBuf,
}

/// Runs `job` in `arm` with the probe preloaded and checks the proof.
pub fn run(
    ab_dir: &Path,
    probe_so: &Path,
    arm: &Arm,
    job: &Job,
    watcher: &mut dyn Watcher,
) -> Result<Outcome> {
    if !probe_so.is_file() {
        bail!(
            "the probe {} is missing; build it with `cargo build --release -p ab-probe`",
            probe_so.display()
        );
    }
    let runs = ab_dir.join("runs").join(&arm.name);
    std::fs::create_dir_all(&runs).with_context(|| format!("creating {}", runs.display()))?;
    let stem: String = job
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let probe_file = runs.join(format!("{stem}.probe.jsonl"));
    let log = runs.join(format!("{stem}.log"));
    let _ = std::fs::remove_file(&probe_file);
    let mut cmd = command(arm, probe_so, &job.program, &probe_file);
    cmd.args(&job.args);
    if let Some(d) = job.dir {
        cmd.current_dir(d);
    }
    let label = format!("[{}] {}", arm.name, job.name);
    let finished = proc::run(
        &mut cmd,
        &RunOpts {
            label: &label,
            timeout: job.timeout,
            echo: job.echo,
            progress_every: 15,
        },
        watcher,
    )?;
    let mut text = finished.stdout.clone();
    text.extend_from_slice(b"\n--- stderr ---\n");
    text.extend_from_slice(&finished.stderr);
    std::fs::write(&log, text).with_context(|| format!("writing {}", log.display()))?;
    let records = proof::read_records(&probe_file)?;
    let proof = proof::check(&records, arm, job.expect_base);
    Ok(Outcome {
        finished,
        proof,
        log,
        probe_file,
    })
}

/// `program` set up to run in `arm`: the arm's folder first on `LD_LIBRARY_PATH`, the probe
/// preloaded and writing to `probe_file`, the arm's backend on `GGML_BACKEND_PATH`. For a
/// process the caller manages itself (a server); [`run`] uses it too.
pub fn command(arm: &Arm, probe_so: &Path, program: &Path, probe_file: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("LD_LIBRARY_PATH", prepend(&arm.lib_dir, "LD_LIBRARY_PATH"));
    let mut preload = OsString::from(probe_so);
    if let Some(p) = &arm.preload {
        preload.push(":");
        preload.push(p);
    }
    if let Some(old) = users_list("LD_PRELOAD") {
        preload.push(":");
        preload.push(old);
    }
    cmd.env("LD_PRELOAD", preload);
    cmd.env(ab_probe_env(), probe_file);
    if let Some((b, _)) = &arm.backend {
        cmd.env("GGML_BACKEND_PATH", b);
    }
    cmd
}

/// The probe's output variable (kept in one place; the probe crate defines the same name).
pub fn ab_probe_env() -> &'static str {
    "GGML_AB_PROBE_OUT"
}

/// `dir` followed by the current value of `var` (colon-separated), if any.
fn prepend(dir: &Path, var: &str) -> OsString {
    let mut v = OsString::from(dir);
    if let Some(old) = users_list(var) {
        v.push(":");
        v.push(old);
    }
    v
}

/// `dir` first on `LD_LIBRARY_PATH`, then the user's own entries, as every run gets it
/// ([`prepend`]): for a child that must find libraries where the runs find them.
pub fn library_path_before_users(dir: &Path) -> OsString {
    prepend(dir, "LD_LIBRARY_PATH")
}

/// The user's own `LD_LIBRARY_PATH` or `LD_PRELOAD` (None when unset or empty), its relative
/// entries taken from the folder they called the harness from, since the programs run
/// elsewhere (`bundle::caller_search_list`). A list that cannot be resolved is passed on as
/// it is, with a warning the first time for each variable.
fn users_list(var: &str) -> Option<OsString> {
    static WARNED_PRELOAD: std::sync::Once = std::sync::Once::new();
    static WARNED_OTHER: std::sync::Once = std::sync::Once::new();
    let value = std::env::var_os(var).filter(|o| !o.is_empty())?;
    Some(
        bundle::caller_search_list(var, &value).unwrap_or_else(|why| {
            let once = if var == "LD_PRELOAD" {
                &WARNED_PRELOAD
            } else {
                &WARNED_OTHER
            };
            once.call_once(|| crate::say(&format!("warning: {why}")));
            value
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arm_names_are_plain_folder_names() {
        for ok in ["a", "b", "stock", "check-other", "v0.25.3_rc"] {
            assert!(check_arm_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", ".", "..", "../../x", "/tmp/x", "a/b", "a:b", "a b", ".hidden",
        ] {
            let e = check_arm_name(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        let e = Arm::prepare(
            Path::new("/nonexistent"),
            "../x",
            Path::new("/bin/sh"),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("not a plain name"),
            "refused before any file is made: {e}"
        );
    }

    #[test]
    fn an_arm_in_use_is_not_prepared_again() {
        let d = std::env::temp_dir().join(format!("swap-lock-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let lib = d.join("lib.so");
        std::fs::write(&lib, b"not a library, only bytes to copy").unwrap();
        let held = Arm::prepare(&d, "a", &lib, None).unwrap();
        let e = Arm::prepare(&d, "a", &lib, None).unwrap_err().to_string();
        assert!(e.starts_with("arm a: ") && e.contains("in use"), "{e}");
        // An arm's copy named as an arm's source, its own or another's, is refused.
        for name in ["a", "b"] {
            let e = check_not_an_arm_copy(&d, name, &held.lib_copy.canonicalize().unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains("the arms' copies"), "{e}");
        }
        assert!(check_not_an_arm_copy(&d, "a", &lib.canonicalize().unwrap()).is_ok());
        // Another arm of the same folder is free, and the arm is free once dropped.
        drop(Arm::prepare(&d, "b", &lib, None).unwrap());
        drop(held);
        assert_eq!(
            Arm::prepare(&d, "a", &lib, None).unwrap().lib_copy,
            d.join("arms/a/lib/libggml-base.so.0")
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
