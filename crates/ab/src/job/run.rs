//! The orchestration of the main job: resolve the two arms, run every work in each arm with
//! its proof, rewrite the report after every run, print the table.

use super::catalogue::{works, Kind, Work};
use super::compare::compare;
use super::report::{self, ArmReport, Intended, Report, RunReport};
use super::table::print_table;
use crate::parse::{self, Counts};
use crate::paths::{self, Paths};
use crate::proc::{Stream, Watcher};
use crate::proof::Library;
use crate::swap::{self, Arm, Job};
use crate::{fmt_secs, say};
use anyhow::{bail, Context, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Options of the main job.
#[derive(Debug, Clone)]
pub struct AbOptions {
    /// libggml-base file of arm A (default: the llama build's own).
    pub a: Option<PathBuf>,
    /// libggml-base file of arm B (default: ours, built on demand).
    pub b: Option<PathBuf>,
    /// A backend library for `GGML_BACKEND_PATH`, in both arms.
    pub backend: Option<PathBuf>,
    /// A llama.cpp build folder instead of the pinned stock build.
    pub llama_build: Option<PathBuf>,
    /// test-backend-ops over every op in one run instead of [`super::catalogue::DEFAULT_OPS`].
    pub full: bool,
    /// Comma-separated work names or name prefixes (`simple`, `backend-ops`, `ctest`,
    /// `backend-ops MUL_MAT`).
    pub only: Option<String>,
    /// The generation works' model (default: the pinned one).
    pub model: Option<PathBuf>,
    /// `-ngl` of the partial-offload generation on builds with a device besides the CPU.
    pub partial_ngl: u32,
    /// ctest labels whose tests are left out, besides `model`.
    pub ctest_exclude_labels: Vec<String>,
    /// Placement pages of the generation works (`crate::views`).
    pub view: bool,
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

/// Takes a work's lock in the llama.cpp build folder ([`Work::build_lock`]), waiting for
/// another harness process that holds it (named in a progress line). A build folder where the
/// lock cannot be made (read-only, say) runs without one, with a warning: its ctest cannot
/// write there either, so no other job's can.
fn take_build_lock(lock: &Path, label: &str) -> Result<Option<std::fs::File>> {
    let folder = lock.parent().unwrap_or(lock);
    match bundle::lock_file_waiting(lock, |holder| {
        say(&format!(
            "{label}: waiting for another harness process's run in {} ({holder})",
            folder.display()
        ))
    }) {
        Ok(f) => Ok(Some(f)),
        Err(why) => {
            say(&format!(
                "{label}: warning: {why}; running without the build folder's lock"
            ));
            Ok(None)
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
        dir: None,
    };
    // Held until the run has ended (dropped with this function's locals).
    let _build_lock = match &work.build_lock {
        Some(lock) => take_build_lock(lock, &label)?,
        None => None,
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
///
/// Arm a is what its file held when the job started: building ours can replace that file
/// (`--a target/ours/lib/libggml-base.so.0`, last build against this one), and arm a would
/// then run the new build too. Its sha256 is taken before the build; when the file changed,
/// arm a runs the store's copy of the old bytes ([`lib_store`] keeps every library ours
/// built and every arm that ran), and without one the job stops, naming both hashes.
fn arm_files(paths: &Paths, opts: &AbOptions, build: &Path) -> Result<[(String, PathBuf); 2]> {
    let a = match &opts.a {
        Some(f) => ("a".to_string(), lib_store::resolve(&paths.ab_dir(), f)?),
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
    let a_before = match opts.b {
        // Only building ours can change arm a's file under the job.
        None if opts.a.is_some() => Some(pins::sha256_file(&a.1)?),
        _ => None,
    };
    let b = match &opts.b {
        Some(f) => ("b".to_string(), lib_store::resolve(&paths.ab_dir(), f)?),
        None => match crate::ours::build(paths) {
            Ok(i) => ("ours".to_string(), i.base),
            Err(e) => bail!(
                "the default arm `ours` needs our libggml-base, which could not be built:\n{e:#}\n\
                     pass --b FILE to compare another libggml-base file"
            ),
        },
    };
    let a = match a_before {
        Some(before) => (a.0, pinned_before_build(&paths.ab_dir(), &a.1, &before)?),
        None => a,
    };
    Ok([a, b])
}

/// Arm a's file as it was before ours was built: `file` itself when it still hashes `before`,
/// else the store's copy of `before`. Errors: the file changed and the store has no copy
/// (the message names both hashes and what to do).
fn pinned_before_build(ab_dir: &Path, file: &Path, before: &str) -> Result<PathBuf> {
    let now = pins::sha256_file(file)?;
    if now == before {
        return Ok(file.to_path_buf());
    }
    let full = Path::new(before);
    match lib_store::resolve(ab_dir, full) {
        Ok(stored) => {
            say(&format!(
                "arm a: building ours replaced {} (sha256 {before} when the job started, \
                 {now} now); arm a runs the stored copy of the first, {}",
                file.display(),
                stored.display()
            ));
            Ok(stored)
        }
        Err(e) => bail!(
            "arm a: building ours replaced {} (sha256 {before} when the job started, {now} \
             now), and the store has no copy of the first ({e:#}); copy the library you mean \
             outside target/ before the job, or pass --b to skip the build",
            file.display()
        ),
    }
}

/// Moves the last job's `report.json` (at `path`) to `report.previous.json` beside it, so the
/// file at `path` is always the running job's or absent. Nothing to do when there is none.
/// Errors: the rename failed (the message names both paths).
fn set_aside_previous(path: &Path) -> Result<()> {
    // symlink_metadata: a dangling link is a report there too
    if path.symlink_metadata().is_err() {
        return Ok(());
    }
    let previous = path.with_file_name("report.previous.json");
    std::fs::rename(path, &previous)
        .with_context(|| format!("moving {} to {}", path.display(), previous.display()))
}

/// Takes the job lock, `target/ab/job.lock`: one job at a time writes `report.json` and the
/// pages, whatever its arms are named. Hold it until the report is final (the reproducer's
/// part merged in).
pub fn lock(paths: &Paths) -> Result<std::fs::File> {
    let ab_dir = paths.ab_dir();
    std::fs::create_dir_all(&ab_dir).with_context(|| format!("creating {}", ab_dir.display()))?;
    bundle::lock_file(&ab_dir.join("job.lock"), &ab_dir.join("report.json"))
        .map_err(anyhow::Error::msg)
}

/// The main job. Returns the report (already written to `target/ab/report.json`). The
/// caller holds [`lock`].
pub fn run(paths: &Paths, opts: &AbOptions) -> Result<Report> {
    let started = Instant::now();
    // A job refused before its first run (an --only that selects nothing, a build without
    // tests, a library of another ggml) must not leave the last job's report in place, read
    // as its own. (Arguments the parser refuses never get here.)
    set_aside_previous(&paths.ab_dir().join("report.json"))?;
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let build = match &opts.llama_build {
        Some(d) => d
            .canonicalize()
            .with_context(|| format!("--llama-build {} not found", d.display()))?,
        None => crate::default_build(paths, None).or_else(|e| {
            if paths.bundle.is_some() {
                Err(e)
            } else {
                crate::stock::ensure(paths, false, crate::stock::Targets::Harness)
            }
        })?,
    };
    // What to run is settled before anything is built or copied: a model a bundle needs
    // and was not given, or an --only that selects nothing, is refused before the arms are
    // set up.
    let model = match &opts.model {
        Some(m) => Some(crate::default_model(paths, Some(m))?),
        None => None,
    };
    // The backend is named before the build lists its devices with it (a missing file
    // would list the build's own devices only).
    if let Some(b) = &opts.backend {
        if !b.is_file() {
            anyhow::bail!(
                "backend {} not found (--backend names a library file)",
                b.display()
            );
        }
    }
    let devices = super::catalogue::devices(&build, opts.backend.as_deref())?;
    say(&format!("devices of the build: {}", devices.join(", ")));
    let plan = super::catalogue::Plan {
        full: opts.full,
        only: opts.only.as_deref(),
        devices,
        model: model.as_deref(),
        partial_ngl: opts.partial_ngl,
        ctest_exclude_labels: &opts.ctest_exclude_labels,
    };
    let mut left_out = Vec::new();
    let works = works(paths, &build, &plan, &mut left_out)?;
    let programs: Vec<&Path> = works
        .iter()
        .map(|w| w.program.as_path())
        .filter(|p| p.starts_with(&build))
        .collect();
    let elsewhere = crate::build_origin::outside(&build, &programs);
    if !elsewhere.is_empty() {
        say(&format!(
            "warning: the llama.cpp build {} does not run from where it is ({}): a build copied \
             or moved after it was built runs the old folder's libggml and libllama, and ctest \
             the old folder's tests; only libggml-base is swapped per arm. Configure and build \
             it where it is (cmake -B DIR), or name the original with --llama-build",
            build.display(),
            elsewhere.join("; ")
        ));
    }
    crate::ensure_probe(paths)?;
    let files = arm_files(paths, opts, &build)?;
    let ab_dir = paths.ab_dir();
    // Every source is checked before any arm is prepared: preparing arm a would replace a
    // file arm b names in a's folder.
    for (name, f) in &files {
        let resolved = f
            .canonicalize()
            .with_context(|| format!("arm {name}: {} not found", f.display()))?;
        swap::check_not_an_arm_copy(&ab_dir, name, &resolved)?;
    }
    let mut arms: Vec<Arm> = files
        .iter()
        .map(|(name, f)| Arm::prepare(&ab_dir, name, f, opts.backend.as_deref()))
        .collect::<Result<_>>()?;
    // Before anything runs: a library of another ggml than the build's would run with
    // mismatched structs.
    crate::abi::check_arms(&build, &mut arms)?;
    for arm in &arms {
        lib_store::keep(&ab_dir, &arm.resolved, &arm.sha256)?;
        say(&format!(
            "arm {}: {} (sha256 {}) -> {}",
            arm.name,
            arm.resolved.display(),
            arm.sha256,
            arm.lib_copy.display()
        ));
    }
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
            left_out: left_out.clone(),
        }
    };
    // Whether pages can be made at all, asked before the runs: without Graphviz, the runs
    // that only feed them are skipped and the reason is said once.
    let generation: Vec<&Work> = works
        .iter()
        .filter(|w| w.kind == Kind::Generation)
        .collect();
    let renderer = (opts.view && !generation.is_empty()).then(|| crate::views::renderer(paths));
    if let Some(Err(e)) = &renderer {
        say(&format!(
            "placement pages: none can be made here ({e:#}); the job runs without them"
        ));
    }
    let pages_wanted = matches!(renderer, Some(Ok(_)));
    let mut runs: Vec<Vec<RunReport>> = vec![Vec::new(), Vec::new()];
    // Written before the first run too: a job interrupted during it must not leave the last
    // job's report in place, marked complete.
    report::write(&path, &make(&runs, false))?;
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
            // Our scheduler records its placements for the pages (stock ignores it).
            let _dump = (pages_wanted && w.kind == Kind::Generation)
                .then(|| {
                    crate::views::Env::set(
                        &crate::views::dump_dir(paths, &arm.name, &w.name),
                        false,
                    )
                })
                .transpose()?;
            let r = run_work(paths, arm, w)?;
            drop(_dump);
            say(&format!("  -> {}", r.cell()));
            for e in &r.proof.errors {
                say(&format!("  PROOF FAILED: {e}"));
            }
            // Said here too, not only in report.json: `--backend` with a program that never
            // loads backends (llama-simple) would otherwise look like an HRX comparison.
            for note in &r.proof.notes {
                say(&format!("  note: {note}"));
            }
            runs[i].push(r);
            // Written after every run: an interrupted job leaves a partial report.
            report::write(&path, &make(&runs, false))?;
        }
    }
    // Stock writes no placement record: arm B's generation works once more with the rule
    // off, which places as stock does, for the pages' A side (not part of the comparison).
    let b = &arms[1];
    if pages_wanted {
        for w in &generation {
            say(&format!(
                "{} in arm {} with GGML_SCHED_INPLACE_RULE=0, for its placement page",
                w.name, b.name
            ));
            let off = crate::views::dump_dir(paths, &format!("{}-rule0", b.name), &w.name);
            let _env = crate::views::Env::set(&off, true)?;
            let mut again = (*w).clone();
            again.name = format!("{} rule0", w.name);
            let r = run_work(paths, b, &again)?;
            say(&format!("  -> {} (log {})", r.cell(), r.log));
        }
    }
    let report = make(&runs, true);
    report::write(&path, &report)?;
    print_table(&report);
    if let Some(renderer) = &renderer {
        let names: Vec<String> = generation.iter().map(|w| w.name.clone()).collect();
        let pages = crate::views::write_pages(paths, renderer, &b.name, &names);
        for p in &pages {
            match &p.error {
                None => say(&format!("page ({}, {}): {}", p.work, p.kind, p.page)),
                // Said once, above, when no page could be made.
                Some(_) if renderer.is_err() => {}
                Some(e) => say(&format!("page ({}, {}) not written: {e}", p.work, p.kind)),
            }
        }
        crate::views::merge(&path, &pages)?;
    }
    say(&format!(
        "report: {} ({} total)",
        path.display(),
        fmt_secs(report.seconds)
    ));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arm a named by a path that building ours replaced runs the bytes it had when the job
    /// started: the store's copy when there is one; with none, the job stops naming both
    /// hashes. An unchanged file is used as it is.
    #[test]
    fn arm_a_replaced_by_the_build_runs_its_old_bytes() {
        let d = std::env::temp_dir().join(format!("ab-pin-arm-a-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let ab_dir = d.join("ab");
        let file = d.join("libggml-base.so.0");
        std::fs::write(&file, b"old build").unwrap();
        let before = pins::sha256_file(&file).unwrap();
        assert_eq!(
            pinned_before_build(&ab_dir, &file, &before).unwrap(),
            file,
            "unchanged: the file itself"
        );
        std::fs::write(&file, b"new build").unwrap();
        let now = pins::sha256_file(&file).unwrap();
        let err = format!(
            "{:#}",
            pinned_before_build(&ab_dir, &file, &before).unwrap_err()
        );
        assert!(
            err.contains(&before) && err.contains(&now) && err.contains("no copy"),
            "{err}"
        );
        // The old bytes in the store (as `ours::build` and every job keep them).
        let old = d.join("old.so");
        std::fs::write(&old, b"old build").unwrap();
        let stored = lib_store::keep(&ab_dir, &old, &before).unwrap();
        let pinned = pinned_before_build(&ab_dir, &file, &before).unwrap();
        assert_eq!(pinned, stored);
        assert_eq!(std::fs::read(&pinned).unwrap(), b"old build");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_last_report_is_set_aside_not_lost() {
        let d = std::env::temp_dir().join(format!("ab-report-aside-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let report = d.join("report.json");
        // none yet: nothing to do, nothing made
        set_aside_previous(&report).unwrap();
        assert!(!d.join("report.previous.json").exists());
        std::fs::write(&report, r#"{"complete": true}"#).unwrap();
        set_aside_previous(&report).unwrap();
        assert!(!report.exists());
        assert_eq!(
            std::fs::read_to_string(d.join("report.previous.json")).unwrap(),
            r#"{"complete": true}"#
        );
        // a second job replaces the older previous report with the newer one
        std::fs::write(&report, r#"{"complete": false}"#).unwrap();
        set_aside_previous(&report).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("report.previous.json")).unwrap(),
            r#"{"complete": false}"#
        );
        // a dangling link is set aside as well, as a link
        std::os::unix::fs::symlink(d.join("gone.json"), &report).unwrap();
        set_aside_previous(&report).unwrap();
        assert!(report.symlink_metadata().is_err());
        assert!(d
            .join("report.previous.json")
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
