//! The work catalogue: what the main job runs in each arm (programs, arguments, time limits),
//! and the `--only` selection.

use crate::paths::{self, Paths};
use anyhow::{bail, Result};
use serde::Serialize;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The ops the scheduler is most involved with: the default `test-backend-ops` work.
pub const DEFAULT_OPS: &[&str] = &[
    "SET_ROWS",
    "FILL",
    "CPY",
    "SET",
    "GET_ROWS",
    "ADD",
    "MUL_MAT",
    "MUL_MAT_ID",
    "ROPE",
    "SOFT_MAX",
    "RMS_NORM",
    "FLASH_ATTN_EXT",
];

/// The prompt of the generation work.
pub const PROMPT: &str = "The capital of France is";

/// The ctest tests that need the network: the stock baseline's known failures, excluded.
pub const NETWORK_TESTS: &[&str] = &[
    "test-download-model",
    "test-thread-safety",
    "test-arg-parser",
    "test-eval-callback-download-model",
    "test-eval-callback",
];

/// What kind of result a work gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Text on stdout, compared byte for byte.
    Generation,
    /// test-backend-ops: pass/fail counts.
    BackendOps,
    /// ctest: pass/fail counts.
    Ctest,
}

/// One piece of work, run once per arm.
#[derive(Debug, Clone)]
pub struct Work {
    /// The name in the report and the table (`llama-simple`, `backend-ops ADD`, `ctest`).
    pub name: String,
    /// What kind of result it gives, so how the arms are compared.
    pub kind: Kind,
    /// The program: a file of the llama.cpp build, or `ctest` from `PATH`.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// How long it may run before it is killed and reported timed out.
    pub timeout: Duration,
}

/// A whole number from `AB_*` variable `name`, at least 1: `None` when unset; a value that is
/// not one is named in a warning and read as unset (the default applies), never as 0.
fn env_count(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse::<u64>() {
        Ok(n) if n > 0 => Some(n),
        _ => {
            crate::say(&format!(
                "warning: {name}='{v}' is not a whole number of at least 1; using the default"
            ));
            None
        }
    }
}

/// `test-backend-ops -j`: `AB_BACKEND_OPS_JOBS`, else the number of CPUs.
fn backend_ops_jobs() -> usize {
    env_count("AB_BACKEND_OPS_JOBS")
        .map(|n| n as usize)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
}

/// `AB_TIMEOUT_S`: one time limit for every work, instead of each work's own (seconds, at
/// least 1).
fn timeout_override() -> Option<Duration> {
    env_count("AB_TIMEOUT_S").map(Duration::from_secs)
}

/// Builds the work list for a llama.cpp build folder.
pub fn works(
    paths: &Paths,
    llama_build: &Path,
    full: bool,
    only: Option<&str>,
) -> Result<Vec<Work>> {
    let wanted: Option<Vec<String>> = only.map(|o| {
        o.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    });
    let selected = |name: &str| match &wanted {
        None => true,
        Some(w) => w.iter().any(|x| {
            name == x
                || name.starts_with(&format!("{x} "))
                || name.strip_prefix("llama-") == Some(x.as_str())
        }),
    };
    let t = |d: u64| timeout_override().unwrap_or(Duration::from_secs(d));
    let mut out = Vec::new();
    if selected("llama-simple") {
        let pins = pins::Pins::load(&paths.root)?;
        let model = pins.ensure_model(&paths.target)?;
        out.push(Work {
            name: "llama-simple".into(),
            kind: Kind::Generation,
            program: paths::program(llama_build, "llama-simple")?,
            args: vec![
                "-m".into(),
                model.into_os_string(),
                "-n".into(),
                "32".into(),
                PROMPT.into(),
            ],
            timeout: t(600),
        });
    }
    if selected("ctest") {
        let exclude = format!("^({})$", NETWORK_TESTS.join("|"));
        let jobs = env_count("AB_CTEST_JOBS").unwrap_or(1).to_string();
        out.push(Work {
            name: "ctest".into(),
            kind: Kind::Ctest,
            program: PathBuf::from("ctest"),
            args: vec![
                "--test-dir".into(),
                llama_build.as_os_str().to_owned(),
                "-LE".into(),
                "model".into(),
                "-E".into(),
                exclude.into(),
                "--timeout".into(),
                "900".into(),
                "-j".into(),
                jobs.into(),
            ],
            timeout: t(3 * 3600),
        });
    }
    let ops: Vec<Option<&str>> = if full {
        vec![None]
    } else {
        DEFAULT_OPS.iter().map(|o| Some(*o)).collect()
    };
    for op in ops {
        let name = match op {
            Some(o) => format!("backend-ops {o}"),
            None => "backend-ops all".to_string(),
        };
        if !selected(&name) {
            continue;
        }
        let mut args: Vec<OsString> = vec!["test".into(), "-b".into(), "CPU".into()];
        args.push("-j".into());
        args.push(backend_ops_jobs().to_string().into());
        if let Some(o) = op {
            args.push("-o".into());
            args.push(o.into());
        }
        out.push(Work {
            name,
            kind: Kind::BackendOps,
            program: paths::program(llama_build, "test-backend-ops")?,
            args,
            timeout: t(if op.is_some() { 1800 } else { 4 * 3600 }),
        });
    }
    if out.is_empty() {
        bail!("--only {:?} selects no work", only.unwrap_or(""));
    }
    Ok(out)
}
