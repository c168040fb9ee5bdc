//! `ab ab`, the main job: the same work in two arms, a proof per run, `target/ab/report.json`
//! and a readable table.
//!
//! Work (default): `llama-simple` greedy 32 tokens on the pinned model (output compared byte
//! for byte), `test-backend-ops test -b CPU -o OP` for each op of [`DEFAULT_OPS`] (`--full`:
//! every op in one run), and the stock build's ctest suite without the model-labelled and
//! network tests.

use crate::parse::{self, Counts};
use crate::paths::{self, Paths};
use crate::proc::{Stream, Watcher};
use crate::proof::{self, Library, Proof};
use crate::swap::{self, Arm, Job};
use crate::{fmt_secs, say};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    pub name: String,
    pub kind: Kind,
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub timeout: Duration,
}

/// Options of the main job.
#[derive(Debug, Clone)]
pub struct AbOptions {
    pub a: Option<PathBuf>,
    pub b: Option<PathBuf>,
    pub backend: Option<PathBuf>,
    pub llama_build: Option<PathBuf>,
    pub full: bool,
    /// Comma-separated work names or name prefixes (`simple`, `backend-ops`, `ctest`,
    /// `backend-ops MUL_MAT`).
    pub only: Option<String>,
}

/// `test-backend-ops -j`: `AB_BACKEND_OPS_JOBS`, else the number of CPUs.
fn backend_ops_jobs() -> usize {
    std::env::var("AB_BACKEND_OPS_JOBS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
}

fn timeout_override() -> Option<Duration> {
    std::env::var("AB_TIMEOUT_S")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_secs)
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
        let jobs = std::env::var("AB_CTEST_JOBS").unwrap_or_else(|_| "1".into());
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

/// One run of one work in one arm, as reported.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub name: String,
    pub kind: Kind,
    pub command: Vec<String>,
    pub exit_code: Option<i32>,
    /// The signal that ended the process, by name (`SIGSEGV`).
    pub signal: Option<String>,
    pub timed_out: bool,
    pub passed: Option<u64>,
    pub failed: Option<u64>,
    pub not_supported: Option<u64>,
    pub failed_tests: Vec<String>,
    /// The generated text (generation work only).
    pub output_text: Option<String>,
    /// sha256 of stdout.
    pub output_sha256: String,
    pub seconds: f64,
    pub proof: Proof,
    pub log: String,
    pub probe_records: String,
}

impl RunReport {
    /// One-cell summary for the table.
    pub fn cell(&self) -> String {
        let mut s = match (self.passed, self.failed) {
            (Some(p), Some(f)) => format!("{p} passed, {f} failed"),
            _ => match &self.output_text {
                Some(t) => format!("{} bytes", t.len()),
                None => String::new(),
            },
        };
        let end = if self.timed_out {
            "TIMEOUT".to_string()
        } else if let Some(sig) = &self.signal {
            sig.clone()
        } else {
            format!("exit {}", self.exit_code.unwrap_or(-1))
        };
        if !s.is_empty() {
            s.push_str(", ");
        }
        s.push_str(&end);
        s.push_str(&format!(", {}", fmt_secs(self.seconds)));
        if !self.proof.ok {
            s.push_str(", PROOF FAILED");
        }
        s
    }
}

/// An arm of the report.
#[derive(Debug, Clone, Serialize)]
pub struct ArmReport {
    pub name: String,
    /// The file as named, the resolved file, its sha256.
    pub intended: Intended,
    /// The copy processes should map (`target/ab/arms/<name>/lib/libggml-base.so.0`).
    pub swap_copy: String,
    pub backend: Option<Intended>,
    /// Every library mapped by any process of this arm (name, path, sha256).
    pub libraries: Vec<Library>,
    /// True when every run's proof held.
    pub proof_ok: bool,
    pub runs: Vec<RunReport>,
}

/// A file the user meant.
#[derive(Debug, Clone, Serialize)]
pub struct Intended {
    pub source: String,
    pub path: String,
    pub sha256: String,
}

/// One work compared across the arms.
#[derive(Debug, Clone, Serialize)]
pub struct RunComparison {
    pub name: String,
    /// Both ended the same way (same exit code and signal).
    pub same_end: bool,
    /// Generation: texts equal byte for byte. Suites: `None`.
    pub outputs_equal: Option<bool>,
    /// Suites: pass/fail counts and failing-case names equal. Generation: `None`.
    pub counts_equal: Option<bool>,
    pub equal: bool,
}

/// The `comparison` section.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The two intended files have the same sha256.
    pub same_file: bool,
    /// Every run in both arms proved the intended library was mapped.
    pub proofs_ok: bool,
    pub runs: Vec<RunComparison>,
    pub all_outputs_equal: bool,
    pub all_counts_equal: bool,
    pub all_equal: bool,
}

/// The whole report (`target/ab/report.json`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub version: u32,
    /// False while the job runs (the report is rewritten after every run) or when it was cut
    /// short.
    pub complete: bool,
    pub llama_build: String,
    pub probe: String,
    pub started_unix: u64,
    pub seconds: f64,
    pub arms: Vec<ArmReport>,
    pub comparison: Comparison,
}

/// Progress for a suite: counts case lines and shows ctest's result lines.
struct SuiteWatch {
    kind: Kind,
    label: String,
    ok: u64,
    fail: u64,
    started: Instant,
}

impl Watcher for SuiteWatch {
    fn line(&mut self, stream: Stream, line: &str) {
        if stream != Stream::Stdout {
            return;
        }
        match self.kind {
            Kind::BackendOps => match parse::backend_ops_case(&parse::strip_ansi(line)) {
                Some(parse::CaseLine::Ok) => self.ok += 1,
                Some(parse::CaseLine::Fail(name)) => {
                    self.fail += 1;
                    say(&format!("  {}: FAIL {}", self.label, name));
                }
                _ => {}
            },
            Kind::Ctest => {
                if let Some((n, total, name, status)) = parse::ctest_result(line) {
                    if status == "Passed" {
                        self.ok += 1;
                    } else {
                        self.fail += 1;
                    }
                    say(&format!(
                        "  {}: [{n}/{total}] {name}: {status} ({})",
                        self.label,
                        fmt_secs(self.started.elapsed().as_secs_f64())
                    ));
                }
            }
            Kind::Generation => {}
        }
    }
    fn status(&self) -> Option<String> {
        match self.kind {
            Kind::Generation => None,
            _ => Some(format!("{} ok, {} failed so far", self.ok, self.fail)),
        }
    }
}

/// Runs one work in one arm and builds its report entry.
pub fn run_work(paths: &Paths, arm: &Arm, work: &Work) -> Result<RunReport> {
    let label = format!("[{}] {}", arm.name, work.name);
    let mut watch = SuiteWatch {
        kind: work.kind,
        label: label.clone(),
        ok: 0,
        fail: 0,
        started: Instant::now(),
    };
    let job = Job {
        name: &work.name,
        program: work.program.clone(),
        args: work.args.clone(),
        timeout: work.timeout,
        echo: false,
        expect_base: true,
    };
    let o = swap::run(&paths.ab_dir(), &paths.probe(), arm, &job, &mut watch)?;
    let stdout = String::from_utf8_lossy(&o.finished.stdout).into_owned();
    let counts: Option<Counts> = match work.kind {
        Kind::Generation => None,
        Kind::BackendOps => Some(parse::backend_ops(&stdout)),
        Kind::Ctest => Some(parse::ctest(&stdout)),
    };
    let mut command = vec![work.program.display().to_string()];
    command.extend(work.args.iter().map(|a| a.to_string_lossy().into_owned()));
    Ok(RunReport {
        name: work.name.clone(),
        kind: work.kind,
        command,
        exit_code: o.finished.exit_code,
        signal: o.finished.signal.clone(),
        timed_out: o.finished.timed_out,
        passed: counts.as_ref().map(|c| c.passed),
        failed: counts.as_ref().map(|c| c.failed),
        not_supported: counts
            .as_ref()
            .filter(|_| work.kind == Kind::BackendOps)
            .map(|c| c.not_supported),
        failed_tests: counts.map(|c| c.failed_names).unwrap_or_default(),
        output_text: (work.kind == Kind::Generation).then(|| stdout.clone()),
        output_sha256: filehash::sha256_hex(&o.finished.stdout),
        seconds: o.finished.seconds,
        proof: o.proof,
        log: o.log.display().to_string(),
        probe_records: o.probe_file.display().to_string(),
    })
}

fn intended(arm: &Arm) -> Intended {
    Intended {
        source: arm.source.display().to_string(),
        path: arm.resolved.display().to_string(),
        sha256: arm.sha256.clone(),
    }
}

/// Compares the runs of two arms, work by work.
pub fn compare(a: &ArmReport, b: &ArmReport) -> Comparison {
    let mut runs = Vec::new();
    for ra in &a.runs {
        let Some(rb) = b.runs.iter().find(|r| r.name == ra.name) else {
            continue;
        };
        let same_end =
            ra.exit_code == rb.exit_code && ra.signal == rb.signal && ra.timed_out == rb.timed_out;
        let (outputs_equal, counts_equal) = match ra.kind {
            Kind::Generation => (Some(ra.output_text == rb.output_text), None),
            _ => (
                None,
                Some(
                    ra.passed == rb.passed
                        && ra.failed == rb.failed
                        && ra.not_supported == rb.not_supported
                        && ra.failed_tests == rb.failed_tests,
                ),
            ),
        };
        runs.push(RunComparison {
            name: ra.name.clone(),
            same_end,
            outputs_equal,
            counts_equal,
            equal: same_end && outputs_equal.unwrap_or(true) && counts_equal.unwrap_or(true),
        });
    }
    let all_outputs_equal = runs.iter().all(|r| r.outputs_equal.unwrap_or(true));
    let all_counts_equal = runs.iter().all(|r| r.counts_equal.unwrap_or(true));
    Comparison {
        same_file: a.intended.sha256 == b.intended.sha256,
        proofs_ok: a.proof_ok && b.proof_ok,
        all_equal: runs.iter().all(|r| r.equal),
        all_outputs_equal,
        all_counts_equal,
        runs,
    }
}

fn arm_report(arm: &Arm, runs: Vec<RunReport>) -> ArmReport {
    let libraries: BTreeSet<Library> = runs
        .iter()
        .flat_map(|r| r.proof.libraries.iter().cloned())
        .collect();
    ArmReport {
        name: arm.name.clone(),
        intended: intended(arm),
        swap_copy: arm.lib_copy.display().to_string(),
        backend: arm.backend.as_ref().map(|(p, s)| Intended {
            source: p.display().to_string(),
            path: p.display().to_string(),
            sha256: s.clone(),
        }),
        libraries: libraries.into_iter().collect(),
        proof_ok: runs.iter().all(|r| r.proof.ok),
        runs,
    }
}

/// Resolves the two arms' files: `--a`/`--b`, else the build's own `libggml-base.so.0` and
/// ours (built on demand).
fn arm_files(paths: &Paths, opts: &AbOptions, build: &Path) -> Result<[(String, PathBuf); 2]> {
    let a = match &opts.a {
        Some(f) => ("a".to_string(), f.clone()),
        None => {
            let f = paths::bin_dir(build).join("libggml-base.so.0");
            if !f.exists() {
                bail!(
                    "{} not found: the llama.cpp build at {} has no libggml-base.so.0; name the file with --a",
                    f.display(),
                    build.display()
                );
            }
            ("stock".to_string(), f)
        }
    };
    let b = match &opts.b {
        Some(f) => ("b".to_string(), f.clone()),
        None => match crate::ours::build(paths) {
            Ok(i) => ("ours".to_string(), i.base),
            Err(e) => bail!(
                "the default arm `ours` needs our libggml-base, which could not be built:\n{e:#}\n\
                     pass --b FILE to compare another libggml-base file"
            ),
        },
    };
    Ok([a, b])
}

/// The main job. Returns the report (already written to `target/ab/report.json`).
pub fn run(paths: &Paths, opts: &AbOptions) -> Result<Report> {
    let started = Instant::now();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let build = match &opts.llama_build {
        Some(d) => d
            .canonicalize()
            .with_context(|| format!("--llama-build {} not found", d.display()))?,
        None => crate::stock::ensure(paths, false)?,
    };
    crate::ensure_probe(paths)?;
    let files = arm_files(paths, opts, &build)?;
    let ab_dir = paths.ab_dir();
    let arms: Vec<Arm> = files
        .iter()
        .map(|(name, f)| Arm::prepare(&ab_dir, name, f, opts.backend.as_deref()))
        .collect::<Result<_>>()?;
    for arm in &arms {
        say(&format!(
            "arm {}: {} (sha256 {}) -> {}",
            arm.name,
            arm.resolved.display(),
            arm.sha256,
            arm.lib_copy.display()
        ));
    }
    let works = works(paths, &build, opts.full, opts.only.as_deref())?;
    let total = works.len() * arms.len();
    let path = ab_dir.join("report.json");
    let make = |runs: &[Vec<RunReport>], complete: bool| {
        let arm_reports: Vec<ArmReport> = arms
            .iter()
            .zip(runs)
            .map(|(a, r)| arm_report(a, r.clone()))
            .collect();
        let comparison = compare(&arm_reports[0], &arm_reports[1]);
        Report {
            version: 1,
            complete,
            llama_build: build.display().to_string(),
            probe: paths.probe().display().to_string(),
            started_unix,
            seconds: started.elapsed().as_secs_f64(),
            arms: arm_reports,
            comparison,
        }
    };
    let mut runs: Vec<Vec<RunReport>> = vec![Vec::new(), Vec::new()];
    let mut k = 0;
    for w in &works {
        for (i, arm) in arms.iter().enumerate() {
            k += 1;
            say(&format!(
                "[{k}/{total}] {} in arm {} ({} elapsed)",
                w.name,
                arm.name,
                fmt_secs(started.elapsed().as_secs_f64())
            ));
            let r = run_work(paths, arm, w)?;
            say(&format!("  -> {}", r.cell()));
            for e in &r.proof.errors {
                say(&format!("  PROOF FAILED: {e}"));
            }
            runs[i].push(r);
            // Written after every run: an interrupted job leaves a partial report.
            write_report(&path, &make(&runs, false))?;
        }
    }
    let report = make(&runs, true);
    write_report(&path, &report)?;
    print_table(&report);
    say(&format!(
        "report: {} ({} total)",
        path.display(),
        fmt_secs(report.seconds)
    ));
    Ok(report)
}

fn write_report(path: &Path, r: &Report) -> Result<()> {
    let tmp = path.with_extension("json.part");
    std::fs::write(&tmp, serde_json::to_string_pretty(r)?)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(16)]
}

/// Prints the readable table of a report.
pub fn print_table(r: &Report) {
    println!();
    println!("== arms ==");
    for a in &r.arms {
        println!(
            "{:<6} intended {} sha256 {}",
            a.name, a.intended.path, a.intended.sha256
        );
        let bases: Vec<&Library> = a
            .libraries
            .iter()
            .filter(|l| l.name == "libggml-base")
            .collect();
        for l in bases {
            println!(
                "       mapped   {} sha256 {}",
                l.path,
                l.sha256.as_deref().unwrap_or("(unreadable)")
            );
        }
        println!(
            "       proof    {}",
            if a.proof_ok { "OK" } else { "FAILED" }
        );
    }
    let (a, b) = (&r.arms[0], &r.arms[1]);
    println!();
    println!("== libraries mapped (name: {} | {}) ==", a.name, b.name);
    let names: BTreeSet<&str> = a
        .libraries
        .iter()
        .chain(b.libraries.iter())
        .map(|l| l.name.as_str())
        .collect();
    for n in names {
        let list = |arm: &ArmReport| {
            arm.libraries
                .iter()
                .filter(|l| l.name == n)
                .map(|l| short(l.sha256.as_deref().unwrap_or("?")).to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        println!("{:<18} {:<18} | {}", n, list(a), list(b));
    }
    println!();
    let w0 = r
        .comparison
        .runs
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let cells: Vec<(String, String)> = a
        .runs
        .iter()
        .map(|ra| {
            let rb = b.runs.iter().find(|x| x.name == ra.name);
            (ra.cell(), rb.map(RunReport::cell).unwrap_or_default())
        })
        .collect();
    let w1 = cells
        .iter()
        .map(|c| c.0.len())
        .max()
        .unwrap_or(0)
        .max(a.name.len());
    let w2 = cells
        .iter()
        .map(|c| c.1.len())
        .max()
        .unwrap_or(0)
        .max(b.name.len());
    println!("{:<w0$}  {:<w1$}  {:<w2$}  same?", "work", a.name, b.name);
    println!("{}", "-".repeat(w0 + w1 + w2 + 12));
    for (c, (ca, cb)) in r.comparison.runs.iter().zip(cells.iter()) {
        let verdict = if c.equal {
            match c.outputs_equal {
                Some(true) => "yes (output equal)",
                _ => "yes",
            }
        } else if c.outputs_equal == Some(false) {
            "NO: output differs"
        } else if c.counts_equal == Some(false) {
            "NO: counts differ"
        } else {
            "NO: ended differently"
        };
        println!("{:<w0$}  {ca:<w1$}  {cb:<w2$}  {verdict}", c.name);
    }
    println!();
    let c = &r.comparison;
    println!(
        "same file: {}; proofs: {}; outputs equal: {}; counts equal: {}",
        if c.same_file { "yes" } else { "no" },
        if c.proofs_ok { "OK" } else { "FAILED" },
        if c.all_outputs_equal { "yes" } else { "NO" },
        if c.all_counts_equal { "yes" } else { "NO" },
    );
    if let Some(g) = a.runs.iter().find(|r| r.kind == Kind::Generation) {
        if let Some(t) = &g.output_text {
            println!("{} generated: {:?}", a.name, t.trim_end());
        }
    }
    if let Some(g) = b.runs.iter().find(|r| r.kind == Kind::Generation) {
        if let Some(t) = &g.output_text {
            println!("{} generated: {:?}", b.name, t.trim_end());
        }
    }
    for arm in &r.arms {
        for run in arm.runs.iter().filter(|r| !r.proof.ok) {
            println!(
                "[{}] {}: {}",
                arm.name,
                run.name,
                proof::summary(&run.proof)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        name: &str,
        kind: Kind,
        passed: Option<u64>,
        text: Option<&str>,
        sig: Option<&str>,
    ) -> RunReport {
        RunReport {
            name: name.into(),
            kind,
            command: vec![],
            exit_code: if sig.is_some() { None } else { Some(0) },
            signal: sig.map(String::from),
            timed_out: false,
            passed,
            failed: passed.map(|_| 0),
            not_supported: None,
            failed_tests: vec![],
            output_text: text.map(String::from),
            output_sha256: String::new(),
            seconds: 1.0,
            proof: Proof {
                ok: true,
                processes: 1,
                base_processes: 1,
                errors: vec![],
                notes: vec![],
                libraries: vec![],
            },
            log: String::new(),
            probe_records: String::new(),
        }
    }

    fn arm(name: &str, sha: &str, runs: Vec<RunReport>) -> ArmReport {
        ArmReport {
            name: name.into(),
            intended: Intended {
                source: "x".into(),
                path: "x".into(),
                sha256: sha.into(),
            },
            swap_copy: String::new(),
            backend: None,
            libraries: vec![],
            proof_ok: true,
            runs,
        }
    }

    #[test]
    fn equal_arms_compare_equal() {
        let mk = || {
            vec![
                run("llama-simple", Kind::Generation, None, Some("Paris"), None),
                run("ctest", Kind::Ctest, Some(49), None, None),
            ]
        };
        let c = compare(&arm("a", "s", mk()), &arm("b", "s", mk()));
        assert!(c.same_file && c.all_equal && c.all_outputs_equal && c.all_counts_equal);
        assert_eq!(c.runs.len(), 2);
    }

    #[test]
    fn differences_are_named() {
        let a = arm(
            "a",
            "s1",
            vec![
                run("llama-simple", Kind::Generation, None, Some("Paris"), None),
                run("backend-ops ADD", Kind::BackendOps, Some(154), None, None),
                run("ctest", Kind::Ctest, Some(49), None, None),
            ],
        );
        let b = arm(
            "b",
            "s2",
            vec![
                run("llama-simple", Kind::Generation, None, Some("Lyon"), None),
                run(
                    "backend-ops ADD",
                    Kind::BackendOps,
                    None,
                    None,
                    Some("SIGSEGV"),
                ),
                run("ctest", Kind::Ctest, Some(48), None, None),
            ],
        );
        let c = compare(&a, &b);
        assert!(!c.same_file && !c.all_equal);
        assert_eq!(c.runs[0].outputs_equal, Some(false));
        assert!(!c.runs[1].same_end);
        assert_eq!(c.runs[2].counts_equal, Some(false));
        assert!(b.runs[1].cell().contains("SIGSEGV"));
    }
}
