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
    /// A lock file in the llama.cpp build folder, held while the work runs, for work that
    /// writes that folder: ctest (its tests rewrite `tests/test-models/*.gguf`, which others
    /// of its tests map, so two jobs' ctest runs in one build fail each other's tests with
    /// bus errors). Another harness process holding it is waited for.
    pub build_lock: Option<PathBuf>,
}

/// The lock file of a llama.cpp build folder's ctest runs ([`Work::build_lock`]).
pub const CTEST_LOCK: &str = ".ab-ctest.lock";

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

/// Checks one `--ctest-exclude-label` value (the clap parser of the option, so a bad one is
/// refused before anything runs): a label of ASCII letters, digits, `-` and `_`, since it
/// goes into a regular expression.
pub fn ctest_label(label: &str) -> std::result::Result<String, String> {
    if label.is_empty()
        || !label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "'{label}': a ctest label here is ASCII letters, digits, - and _"
        ));
    }
    Ok(label.to_string())
}

/// ctest's `-LE` regular expression: the labels `model` (tests that need a downloaded model,
/// matched anywhere in a label, as upstream's CI does) and each of `extra` whole.
///
/// Errors: a label [`ctest_label`] refuses.
pub fn ctest_label_exclusion(extra: &[String]) -> Result<String> {
    for l in extra {
        ctest_label(l).map_err(|e| anyhow::anyhow!("--ctest-exclude-label {e}"))?;
    }
    Ok(if extra.is_empty() {
        "model".to_string()
    } else {
        format!("model|^({})$", extra.join("|"))
    })
}

/// `AB_TIMEOUT_S`: one time limit for every work, instead of each work's own (seconds, at
/// least 1).
pub(crate) fn timeout_override() -> Option<Duration> {
    env_count("AB_TIMEOUT_S").map(Duration::from_secs)
}

/// What the job runs beyond the build: which works, on which devices, with which model.
#[derive(Debug, Clone, Default)]
pub struct Plan<'a> {
    /// test-backend-ops over every op in one run per device.
    pub full: bool,
    /// `--only`: comma-separated work names or prefixes.
    pub only: Option<&'a str>,
    /// The build's devices (see [`devices`]); `CPU` first.
    pub devices: Vec<String>,
    /// The generation works' model; None: the pinned one (fetched when missing).
    pub model: Option<&'a Path>,
    /// Layers offloaded in the partial-offload generation (`-ngl`), on builds with a device
    /// besides the CPU.
    pub partial_ngl: u32,
    /// ctest labels whose tests are left out, besides `model` (always left out).
    pub ctest_exclude_labels: &'a [String],
}

/// The devices a llama.cpp build has: `CPU`, then every device `llama-completion
/// --list-devices` lists (CUDA0, ..., HRX0 when `backend` is loaded through
/// `GGML_BACKEND_PATH`), run with the build's own libraries. A build without
/// `llama-completion` is taken to have the CPU only.
pub fn devices(llama_build: &Path, backend: Option<&Path>) -> Result<Vec<String>> {
    let mut out = vec!["CPU".to_string()];
    let Ok(prog) = paths::program(llama_build, "llama-completion") else {
        crate::say(&format!(
            "warning: {} has no llama-completion, which lists the build's devices: only the \
             CPU is tested",
            llama_build.display()
        ));
        return Ok(out);
    };
    let mut cmd = std::process::Command::new(&prog);
    cmd.arg("--list-devices");
    if let Some(b) = backend {
        cmd.env("GGML_BACKEND_PATH", b);
    }
    let o = cmd
        .output()
        .map_err(|e| anyhow::anyhow!("running {} --list-devices: {e}", prog.display()))?;
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    // A build whose device backend fails to start would otherwise look like a CPU-only build,
    // and its device would go untested while the job passes.
    if !o.status.success() {
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        bail!(
            "{} --list-devices failed ({}), so the build's devices are unknown: {}",
            prog.display(),
            o.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    out.extend(parse_devices(&text));
    Ok(out)
}

/// The device names of `--list-devices` output: the lines `  NAME: description` after
/// `Available devices:`.
pub fn parse_devices(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.starts_with("Available devices:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.trim().split_once(':').map(|(n, _)| n.to_string()))
        .filter(|n| !n.is_empty() && !n.contains(' '))
        .collect()
}

/// Warns when `python3` on `PATH` cannot import jinja2: ctest's test-jinja-py (label
/// `python`) compares llama.cpp's template engine with it and fails in both arms without it.
fn warn_without_jinja2() {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import jinja2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        crate::say(
            "warning: python3 cannot import jinja2, so ctest's test-jinja-py will fail in \
             both arms (`python3 -m pip install jinja2`, or `--ctest-exclude-label python`)",
        );
    }
}

/// How many tests `ctest -N` lists in `build` with these arguments (the test folder and
/// filters). ctest writes its log `Testing/Temporary/LastTest.log` even for a listing: the
/// log of the user's last real run is put back afterwards (or the listing's removed when
/// there was none), so counting leaves the build folder's logs as they were.
///
/// Errors: `ctest` cannot be started (not on `PATH`), or its listing has no
/// `Total Tests: N` line.
fn ctest_count(build: &Path, filter: &[OsString]) -> Result<u64> {
    let testing = build.join("Testing");
    let had_testing = testing.exists();
    let log = testing.join("Temporary/LastTest.log");
    let before = std::fs::read(&log).ok();
    let o = std::process::Command::new("ctest")
        .arg("-N")
        .args(filter)
        .output();
    let restored = match &before {
        Some(bytes) => std::fs::write(&log, bytes),
        None => match std::fs::remove_file(&log) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    };
    if !had_testing {
        // The folders ctest made for the listing's log alone (kept if anything else is there).
        let _ = std::fs::remove_dir(testing.join("Temporary"));
        let _ = std::fs::remove_dir(&testing);
    }
    if let Err(e) = restored {
        crate::say(&format!(
            "warning: could not put back {} after counting its tests: {e}",
            log.display()
        ));
    }
    let o = o.map_err(|e| {
        anyhow::anyhow!("ctest could not be started ({e}): it comes with cmake; install cmake, or leave ctest out with --only")
    })?;
    let text = String::from_utf8_lossy(&o.stdout);
    parse_ctest_total(&text).ok_or_else(|| {
        anyhow::anyhow!(
            "`ctest -N` listed no total ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )
    })
}

/// The `N` of ctest's `Total Tests: N` line.
pub fn parse_ctest_total(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Total Tests:"))
        .and_then(|n| n.trim().parse().ok())
}

/// Builds the work list for a llama.cpp build folder. A work the job would run that this
/// build cannot offer is pushed to `left_out` with the reason (`ctest: ...`), for the report.
pub fn works(
    paths: &Paths,
    llama_build: &Path,
    plan: &Plan,
    left_out: &mut Vec<String>,
) -> Result<Vec<Work>> {
    let (full, only) = (plan.full, plan.only);
    let wanted: Option<Vec<String>> = only.map(|o| {
        o.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    });
    let matches = |name: &str, x: &str| {
        name == x
            || name.starts_with(&format!("{x} "))
            || name.strip_prefix("llama-") == Some(x)
            || name.starts_with(&format!("llama-{x} "))
    };
    // Every work this build offers, selected or not: an `--only` name that matches none of
    // them is an error that lists them.
    let offered = std::cell::RefCell::new(Vec::<String>::new());
    let selected = |name: &str| {
        offered.borrow_mut().push(name.to_string());
        match &wanted {
            None => true,
            Some(w) => w.iter().any(|x| matches(name, x)),
        }
    };
    let t = |d: u64| timeout_override().unwrap_or(Duration::from_secs(d));
    let mut out = Vec::new();
    let accel = plan.devices.iter().any(|d| d != "CPU");
    // On a build with a device besides the CPU: full, partial and no offload; else one run.
    let offloads: Vec<Option<u32>> = if accel {
        vec![Some(99), Some(plan.partial_ngl), Some(0)]
    } else {
        vec![None]
    };
    for ngl in offloads {
        let name = match ngl {
            Some(n) => format!("llama-simple ngl={n}"),
            None => "llama-simple".into(),
        };
        if !selected(&name) {
            continue;
        }
        let model = match plan.model {
            Some(m) => m.to_path_buf(),
            None if paths.bundle.is_some() => {
                bail!("from a bundle, name the generation model: --model FILE.gguf")
            }
            None => pins::Pins::load(&paths.root)?.ensure_model(&paths.target)?,
        };
        let mut args: Vec<OsString> = vec!["-m".into(), model.into_os_string()];
        if let Some(n) = ngl {
            args.extend(["-ngl".into(), n.to_string().into()]);
        }
        args.extend(["-n".into(), "32".into(), PROMPT.into()]);
        out.push(Work {
            name,
            kind: Kind::Generation,
            program: paths::program(llama_build, "llama-simple")?,
            args,
            timeout: t(600),
            build_lock: None,
        });
    }
    if selected("ctest") {
        let exclude = format!("^({})$", NETWORK_TESTS.join("|"));
        // One test at a time by default: llama.cpp's tests run ggml's thread pool on every
        // CPU, and two of them side by side spin against each other (with -j 2 on 2 cores,
        // test-save-load-state and test-recurrent-state-rollback took minutes instead of
        // 14 and 8 s).
        let jobs = env_count("AB_CTEST_JOBS").unwrap_or(1).to_string();
        let filter_leaving_out = |labels: String| -> Vec<OsString> {
            vec![
                "--test-dir".into(),
                llama_build.as_os_str().to_owned(),
                "-LE".into(),
                labels.into(),
                "-E".into(),
                exclude.clone().into(),
            ]
        };
        let filter = filter_leaving_out(ctest_label_exclusion(plan.ctest_exclude_labels)?);
        // A build configured without its tests has none to run: both arms would "pass" an
        // empty suite, and no process would map a library to prove.
        let count = ctest_count(llama_build, &filter)?;
        // Labels that leave out nothing more (a typo) would go unnoticed: each is counted.
        // Without extra labels there is nothing to count again.
        let always = if plan.ctest_exclude_labels.is_empty() {
            count
        } else {
            ctest_count(
                llama_build,
                &filter_leaving_out(ctest_label_exclusion(&[])?),
            )?
        };
        for label in plan.ctest_exclude_labels {
            let one = ctest_count(
                llama_build,
                &filter_leaving_out(ctest_label_exclusion(std::slice::from_ref(label))?),
            )?;
            if one == always {
                crate::say(&format!(
                    "warning: --ctest-exclude-label {label}: it leaves out no test of {} \
                     beyond those always left out (labels `model`, the network tests)",
                    llama_build.display()
                ));
            }
        }
        if count > 0 && !plan.ctest_exclude_labels.iter().any(|l| l == "python") {
            warn_without_jinja2();
        }
        let named = wanted.iter().flatten().any(|x| matches("ctest", x));
        if count == 0 && always > 0 {
            // The build has tests; the user's labels left out every one.
            let why = format!(
                "ctest: --ctest-exclude-label {} leaves out all {always} tests of {} that \
                 would run otherwise",
                plan.ctest_exclude_labels.join(", "),
                llama_build.display()
            );
            if named {
                bail!("--only names ctest, but {why}");
            }
            crate::say(&format!("left out: {why}"));
            left_out.push(why);
        } else if count == 0 && named {
            bail!(
                "--only names ctest, but {} has no tests to run (configure llama.cpp with \
                 -DLLAMA_BUILD_TESTS=ON and build every target)",
                llama_build.display()
            );
        } else if count == 0 {
            let why = format!(
                "ctest: {} has no tests (configured without LLAMA_BUILD_TESTS?)",
                llama_build.display()
            );
            crate::say(&format!("left out: {why}"));
            left_out.push(why);
        } else {
            let mut args = filter;
            args.extend(["--timeout".into(), "900".into(), "-j".into(), jobs.into()]);
            out.push(Work {
                name: "ctest".into(),
                kind: Kind::Ctest,
                program: PathBuf::from("ctest"),
                args,
                timeout: t(3 * 3600),
                build_lock: Some(llama_build.join(CTEST_LOCK)),
            });
        }
    } else if !plan.ctest_exclude_labels.is_empty() {
        crate::say(&format!(
            "warning: --ctest-exclude-label {}: ctest is not among the works selected, so \
             it changes nothing",
            plan.ctest_exclude_labels.join(", ")
        ));
    }
    let ops: Vec<Option<&str>> = if full {
        vec![None]
    } else {
        DEFAULT_OPS.iter().map(|o| Some(*o)).collect()
    };
    for dev in &plan.devices {
        // The CPU's works keep their names of CPU-only builds: `backend-ops OP`.
        let prefix = if dev == "CPU" {
            "backend-ops".to_string()
        } else {
            format!("backend-ops {dev}")
        };
        for op in &ops {
            let name = match op {
                Some(o) => format!("{prefix} {o}"),
                None => format!("{prefix} all"),
            };
            if !selected(&name) {
                continue;
            }
            let mut args: Vec<OsString> = vec!["test".into(), "-b".into(), dev.into()];
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
                build_lock: None,
            });
        }
    }
    let offered = offered.into_inner();
    let unknown: Vec<&String> = wanted
        .iter()
        .flatten()
        .filter(|x| !offered.iter().any(|n| matches(n, x)))
        .collect();
    if !unknown.is_empty() || out.is_empty() {
        bail!(
            "--only {:?} selects no work for {}; this build's works: {}",
            only.unwrap_or(""),
            if unknown.is_empty() {
                "any name".to_string()
            } else {
                unknown
                    .iter()
                    .map(|u| format!("{u:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            offered.join(", ")
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A build folder whose ctest lists one test (ctest reads `CTestTestfile.cmake` alone).
    fn one_test_build(dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(
            dir.join("CTestTestfile.cmake"),
            "add_test(only-one \"true\")\n",
        )
        .unwrap();
    }

    #[test]
    fn counting_tests_keeps_the_last_runs_log() {
        let dir = std::env::temp_dir().join(format!("ab-ctest-count-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        one_test_build(&dir);
        let filter = |d: &Path| vec![OsString::from("--test-dir"), d.as_os_str().to_owned()];

        // No earlier run: the count leaves no log and no Testing folder behind.
        assert_eq!(ctest_count(&dir, &filter(&dir)).unwrap(), 1);
        assert!(
            !dir.join("Testing").exists(),
            "the listing left its Testing folder"
        );

        // An earlier run's log is the same bytes afterwards.
        let log = dir.join("Testing/Temporary/LastTest.log");
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        std::fs::write(&log, b"the user's last run\n").unwrap();
        assert_eq!(ctest_count(&dir, &filter(&dir)).unwrap(), 1);
        assert_eq!(std::fs::read(&log).unwrap(), b"the user's last run\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn devices_are_read_off_list_devices() {
        let cuda = concat!(
            "ggml_cuda_init: found 1 CUDA devices:\n",
            "  Device 0: NVIDIA H200, compute capability 9.0\n",
            "Available devices:\n",
            "  CUDA0: NVIDIA H200 (143171 MiB, 142520 MiB free)\n",
            "  HRX0: HRX simulated device 0 (8192 MiB private memory, CPU kernels) (8192 MiB, 8192 MiB free)\n",
        );
        assert_eq!(parse_devices(cuda), vec!["CUDA0", "HRX0"]);
        assert!(parse_devices("Available devices:\n  (none)\n").is_empty());
        assert!(parse_devices("").is_empty());
    }

    /// Labels that leave out every test of a build that has tests are named as the reason,
    /// not the build (whose tests were configured): an error when `--only` names ctest, a
    /// work left out otherwise. Runs `ctest -N` on the stock build (`./ab build-stock`).
    #[test]
    fn labels_leaving_out_every_test_are_named() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let build = root.join("target/llama-stock");
        assert!(
            build.join("CTestTestfile.cmake").is_file(),
            "needs the stock build: ./ab build-stock"
        );
        let paths = Paths {
            root: root.clone(),
            target: root.join("target"),
            bundle: None,
        };
        let labels = ["main".to_string(), "python".to_string()];
        let plan = |only| Plan {
            full: false,
            only,
            devices: vec!["CPU".into()],
            model: None,
            partial_ngl: 0,
            ctest_exclude_labels: &labels,
        };
        let mut left_out = Vec::new();
        let err = works(&paths, &build, &plan(Some("ctest")), &mut left_out).unwrap_err();
        let err = format!("{err:#}");
        assert!(
            err.contains("--ctest-exclude-label main, python leaves out all")
                && !err.contains("LLAMA_BUILD_TESTS"),
            "{err}"
        );
        let picked = works(
            &paths,
            &build,
            &plan(Some("backend-ops ADD")),
            &mut left_out,
        )
        .unwrap();
        assert_eq!(picked.len(), 1);
        assert!(picked[0].build_lock.is_none());
        assert!(left_out.is_empty(), "{left_out:?}");
        // Without the labels ctest runs, holding the build folder's lock.
        let plain = Plan {
            ctest_exclude_labels: &[],
            ..plan(Some("ctest"))
        };
        let ctest = works(&paths, &build, &plain, &mut left_out).unwrap();
        assert_eq!(ctest.len(), 1);
        assert_eq!(ctest[0].build_lock, Some(build.join(CTEST_LOCK)));
    }

    #[test]
    fn ctest_labels_left_out_are_whole_labels_besides_model() {
        assert_eq!(ctest_label_exclusion(&[]).unwrap(), "model");
        let extra = ["python".to_string(), "slow-1".to_string()];
        assert_eq!(
            ctest_label_exclusion(&extra).unwrap(),
            "model|^(python|slow-1)$"
        );
        for bad in ["", "a.b", "x|y", "main$"] {
            let err = ctest_label_exclusion(&[bad.to_string()]).unwrap_err();
            assert!(
                err.to_string().contains(&format!("'{bad}'")),
                "{bad:?}: {err}"
            );
            assert!(ctest_label(bad).is_err(), "{bad:?}");
        }
        assert_eq!(ctest_label("python").unwrap(), "python");
    }

    #[test]
    fn the_ctest_total_is_read_off_its_listing() {
        let listed = "Test project /b\n  Test  #1: test-tokenizer-0-bert-bge\n\nTotal Tests: 47\n";
        assert_eq!(parse_ctest_total(listed), Some(47));
        // A build folder without tests (ctest 3.28's words).
        let empty =
            "Internal ctest changing into directory: /b\nTest project /b\n\nTotal Tests: 0\n";
        assert_eq!(parse_ctest_total(empty), Some(0));
        assert_eq!(parse_ctest_total("Test project /b\n"), None);
    }
}
