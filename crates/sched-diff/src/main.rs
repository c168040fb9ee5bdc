//! `sched-diff`: the scheduler differential test.
//!
//! Compiles the C driver `cabi-tests/sched-diff/sched_diff.c`, runs it over a range of
//! seeds against two `libggml-base.so.0` files (arm A, by default the stock build; arm B,
//! by default ours), and compares, seed by seed, what the two `ggml_backend_sched_*`
//! implementations decided: node placement, split inputs, splits, buffer sizes, where each
//! tensor's data lives (buffer and byte offset), the compute dispatch and the data copies.
//! See `docs/sched-diff.md`.
//!
//! Exit status: 0 when every seed passed (with `--self-test`: every perturbation that
//! changed B was caught, at least one did, and nothing else failed), 1 otherwise, 2 on a
//! usage or setup error. The last line, `N passed, M failed`, says the same.

mod outcome;
mod program;

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use outcome::{
    buffer_sizes, classify, data_differs, differs_only_in_allocation, has_inplace_conflict,
    has_stale_reread, has_unusable_read, has_unusable_write, has_view_copy, hazards_only_via_reuse,
    inplace_candidate, matches_parity, SeedRun, Verdict,
};
use program::{Arm, Program};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The self-test perturbs every seed divisible by this in arm B.
const PERTURB_EVERY: u64 = 7;

/// What arm B's in-place conflicts mean (`--b-inplace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum InplacePolicy {
    /// Expect no in-place conflict in B unless A and B are the same file content.
    Auto,
    /// Every seed where B shows an in-place conflict fails.
    Expect,
    /// Report B's conflicts, fail nothing for them.
    Ignore,
}

/// Which allocation layout arm B runs (`--b-layout`, B's `GGML_ALLOC_LAYOUT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LayoutArg {
    /// Stock's offsets byte for byte: every DATA, ALLOCBUF and BUFSIZE record must match.
    Stock,
    /// The packed layout: seeds that differ only in those records, with no compute buffer of
    /// B larger than A's, are explained.
    Packed,
}

/// The command line, as clap parses it; [`Cli::options`] resolves the defaults that depend on
/// the workspace and the machine.
#[derive(Parser, Debug)]
#[command(
    name = "sched-diff",
    about = "Scheduler differential test: one C driver over random graphs against two \
             libggml-base.so.0 files, diffing what each scheduler decided",
    after_help = "Exit status: 0 when every seed passed (with --self-test: every perturbation \
                  that changed B was caught, at least one did, and nothing else failed), 1 \
                  otherwise, 2 on a usage or \
                  setup error. See docs/sched-diff.md.",
    // The hand-written parser this replaces let a repeated flag's last value win; scripts
    // that append an override to a default command line rely on that.
    args_override_self = true
)]
struct Cli {
    /// Arm A library (default target/llama-stock/bin/libggml-base.so.0).
    #[arg(long, value_name = "LIB_A", value_parser = bundle::caller_path_parser())]
    a: Option<PathBuf>,
    /// Arm B library (default target/ours/lib/libggml-base.so.0; with --self-test the
    /// default is LIB_A).
    #[arg(long, value_name = "LIB_B", value_parser = bundle::caller_path_parser())]
    b: Option<PathBuf>,
    /// Number of seeds (at least 1: a run of no seeds would pass having compared nothing).
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// First seed.
    #[arg(long, value_name = "S", default_value_t = 0)]
    start: u64,
    /// Parallel workers (default: available CPUs; 0 means 1).
    #[arg(long, value_name = "J")]
    jobs: Option<usize>,
    /// Seeds per driver process (default: seeds / (8 * jobs), clamped to 25..500; 0 means 1).
    #[arg(long, value_name = "C")]
    chunk: Option<u64>,
    /// Unexplained differences printed in full.
    #[arg(long, value_name = "K", default_value_t = 3)]
    show: usize,
    /// Limit per driver process, in seconds.
    #[arg(long = "timeout-s", value_name = "T", default_value_t = 120)]
    timeout_s: u64,
    /// In-place conflicts in arm B: expect none (expect), report only (ignore), or expect
    /// none unless A and B are the same file (auto).
    #[arg(long, value_name = "P", value_enum, default_value_t = InplacePolicy::Auto)]
    b_inplace: InplacePolicy,
    /// Arm B's allocation layout (sets GGML_ALLOC_LAYOUT for B; A, stock, ignores it).
    #[arg(long, value_name = "L", value_enum, default_value_t = LayoutArg::Stock)]
    b_layout: LayoutArg,
    /// Run B with SCHED_DIFF_PERTURB=7 (a silent extra backend assignment in every 7th
    /// seed) and SCHED_DIFF_CRASH_SEED (a SIGSEGV in one of them); pass only if every
    /// perturbation that changed B is caught, nothing else fails, and the crash is confined
    /// to its seed.
    #[arg(long)]
    self_test: bool,
}

/// The resolved options of one run.
#[derive(Debug)]
struct Options {
    a: PathBuf,
    b: PathBuf,
    seeds: u64,
    start: u64,
    jobs: usize,
    chunk: Option<u64>,
    show: usize,
    timeout: Duration,
    self_test: bool,
    b_inplace: InplacePolicy,
    b_layout: LayoutArg,
}

impl Cli {
    /// Fills in the defaults: the libraries under the workspace `root`, the CPU count.
    fn options(self, root: &Path) -> Options {
        let a = self
            .a
            .unwrap_or_else(|| root.join("target/llama-stock/bin/libggml-base.so.0"));
        let b = match self.b {
            Some(b) => b,
            None if self.self_test => a.clone(),
            None => root.join("target/ours/lib/libggml-base.so.0"),
        };
        Options {
            a,
            b,
            seeds: self.seeds,
            start: self.start,
            jobs: self
                .jobs
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
                .max(1),
            chunk: self.chunk.map(|c| c.max(1)),
            show: self.show,
            timeout: Duration::from_secs(self.timeout_s),
            self_test: self.self_test,
            b_inplace: self.b_inplace,
            b_layout: self.b_layout,
        }
    }
}

/// The processes a run starts: A, B, B with the in-place rule off, and with `--self-test`
/// B without the perturbation (what B prints when nothing is planted).
struct Arms {
    a: Arm,
    b: Arm,
    b_off: Arm,
    b_plain: Option<Arm>,
    /// With `--self-test`: B without the perturbation, with the rule off, for the seeds whose
    /// perturbation changed nothing in B (they are judged as the unperturbed B would be).
    b_plain_off: Option<Arm>,
}

/// One seed's results in both arms.
struct Pair {
    a: SeedRun,
    b: SeedRun,
    /// With `--self-test`: B's run of the seed without the perturbation and the crash.
    b_plain: Option<SeedRun>,
    /// B's run of the seed with the in-place rule off (`GGML_SCHED_INPLACE_RULE=0`), made
    /// only for a seed whose difference the rule might explain ([`inplace_candidate`]).
    b_off: Option<SeedRun>,
    /// With `--self-test`, a perturbed seed whose perturbation left B's output as it is is
    /// judged as the unperturbed B would be: with B's rule-off run without the perturbation
    /// (then `b_off`). The rule may override the perturbation's assignment, so that B's output
    /// shows nothing of it while a perturbed rule-off run still does: judged with that run,
    /// the seed would fail although B without the perturbation passes.
    verdict: Verdict,
}

/// Runs one chunk of seeds in both arms and classifies them. Where A has an in-place hazard
/// and B differs without one ([`inplace_candidate`]), B runs those seeds again with the
/// rule off (only those seeds, [`program::run_seeds`]), and the difference is
/// explained only when that run matches A.
fn run_chunk(
    prog: &Program,
    arms: &Arms,
    start: u64,
    count: u64,
    o: &Options,
) -> Result<Vec<Pair>> {
    let packed = o.b_layout == LayoutArg::Packed;
    let ra = program::run_range(prog, &arms.a, start, count, o.timeout)?;
    let rb = program::run_range(prog, &arms.b, start, count, o.timeout)?;
    let mut plain = match &arms.b_plain {
        Some(arm) => program::run_range(prog, arm, start, count, o.timeout)?,
        None => Vec::new(),
    }
    .into_iter();
    let candidates: Vec<u64> = ra
        .iter()
        .zip(&rb)
        .filter(|(a, b)| inplace_candidate(a, b, packed).is_some())
        .map(|(a, _)| a.seed)
        .collect();
    let off: Vec<SeedRun> = if candidates.is_empty() {
        Vec::new()
    } else {
        program::run_seeds(prog, &arms.b_off, &candidates, o.timeout)?
    };
    let mut off = off.into_iter().peekable();
    let plain: Vec<Option<SeedRun>> = (0..ra.len()).map(|_| plain.next()).collect();
    // Perturbed seeds whose perturbation changed nothing, among the candidates: judged again
    // with B's rule-off run without the perturbation.
    let invisible: Vec<u64> = match &arms.b_plain_off {
        Some(_) => ra
            .iter()
            .zip(&rb)
            .zip(&plain)
            .filter(|((a, b), pl)| {
                a.seed % PERTURB_EVERY == 0
                    && inplace_candidate(a, b, packed).is_some()
                    && pl.as_ref().is_some_and(|pl| same_output(pl, b))
            })
            .map(|((a, _), _)| a.seed)
            .collect(),
        None => Vec::new(),
    };
    let plain_off: Vec<SeedRun> = match &arms.b_plain_off {
        Some(arm) if !invisible.is_empty() => program::run_seeds(prog, arm, &invisible, o.timeout)?,
        _ => Vec::new(),
    };
    let mut plain_off = plain_off.into_iter().peekable();
    Ok(ra
        .into_iter()
        .zip(rb)
        .zip(plain)
        .map(|((a, b), b_plain)| {
            let perturbed_off = off.next_if(|r| r.seed == a.seed);
            let b_off = plain_off.next_if(|r| r.seed == a.seed).or(perturbed_off);
            let verdict = classify(&a, &b, b_off.as_ref(), packed);
            Pair {
                a,
                b,
                b_plain,
                b_off,
                verdict,
            }
        })
        .collect())
}

fn run_all(prog: &Program, arms: &Arms, o: &Options) -> Result<Vec<Pair>> {
    let chunk = o
        .chunk
        .unwrap_or_else(|| (o.seeds / (8 * o.jobs as u64)).clamp(25, 500));
    let n_chunks = o.seeds.div_ceil(chunk) as usize;
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Pair>> = Mutex::new(Vec::with_capacity(o.seeds as usize));
    let error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..o.jobs.min(n_chunks.max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n_chunks || error.lock().map_or(true, |e| e.is_some()) {
                    break;
                }
                let start = o.start + i as u64 * chunk;
                let count = chunk.min(o.start + o.seeds - start);
                match run_chunk(prog, arms, start, count, o) {
                    Ok(pairs) => {
                        if let Ok(mut r) = results.lock() {
                            r.extend(pairs);
                        }
                    }
                    Err(e) => {
                        if let Ok(mut slot) = error.lock() {
                            slot.get_or_insert(e);
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = error.into_inner().ok().flatten() {
        return Err(e);
    }
    let mut r = results
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a worker panicked"))?;
    r.sort_by_key(|p| p.a.seed);
    Ok(r)
}

fn describe_arm(prog: &Program, arm: &Arm) -> Result<String> {
    let sha = pins::sha256_file(&arm.lib)?;
    let probe = program::probe(prog, arm)?;
    let mapped = &probe.mapped;
    let base: Vec<&PathBuf> = mapped
        .iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libggml-base") || n.starts_with("libggml_base"))
        })
        .collect();
    if base.len() != 1 || base[0].canonicalize().ok().as_ref() != Some(&arm.lib) {
        bail!(
            "arm {}: the driver mapped {:?}, not {}",
            arm.label,
            mapped,
            arm.lib.display()
        );
    }
    program::check_symbols(&probe, arm.label, &arm.lib)?;
    Ok(format!(
        "arm {}: {} (sha256 {})\n       mapped by the driver: {}; its {} scheduler and allocator functions resolve to it",
        arm.label,
        arm.lib.display(),
        sha,
        base[0].display(),
        probe.symbols.len()
    ))
}

/// The line printed once on stderr when the caller's environment has `LD_PRELOAD`: the arms
/// run without it, since a preloaded file's functions would replace the library under test.
fn preload_note(preload: Option<&std::ffi::OsStr>) -> Option<String> {
    let p = preload.filter(|p| !p.is_empty())?;
    Some(format!(
        "sched-diff: LD_PRELOAD={} is not passed to the arms (its functions would come before the library under test)",
        p.to_string_lossy()
    ))
}

fn print_pair(p: &Pair) {
    println!(
        "---- seed {} ({:?}); rerun alone: sched-diff --a A --b B --start {} --seeds 1",
        p.a.seed, p.verdict, p.a.seed
    );
    if let Some(off) = &p.b_off {
        println!(
            "  A has an in-place hazard and B none, but B run with GGML_SCHED_INPLACE_RULE=0 does not match A ({}): the rule does not explain this difference",
            match &off.crash {
                Some(c) => format!("it died: {}", c.how),
                None => "its records differ from A's".to_string(),
            }
        );
    }
    for (label, run) in [("A", &p.a), ("B", &p.b)] {
        if let Some(c) = &run.crash {
            println!("  arm {label} died: {}", c.how);
            if let Some(m) = &c.abort {
                println!("  arm {label} abort: {m}");
            }
            for l in c.stderr_tail.lines() {
                println!("  arm {label} stderr: {l}");
            }
        }
    }
    let a = p.a.lines.join("\n") + "\n";
    let b = p.b.lines.join("\n") + "\n";
    let diff = similar::TextDiff::from_lines(&a, &b);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(
            &format!("A seed {}", p.a.seed),
            &format!("B seed {}", p.b.seed),
        )
        .to_string();
    let lines: Vec<&str> = text.lines().collect();
    const MAX: usize = 150;
    for l in lines.iter().take(MAX) {
        println!("{l}");
    }
    if lines.len() > MAX {
        println!("  ... {} more diff lines", lines.len() - MAX);
    }
}

/// Removes a directory tree when dropped (best effort).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Seeds are `start..start + seeds`: refused when that passes the last `u64` (the sum would
/// wrap, and the run would compare nothing and pass).
fn check_range(start: u64, seeds: u64) -> Result<()> {
    if start.checked_add(seeds).is_none() {
        anyhow::bail!(
            "--start {start} with --seeds {seeds} passes the last seed ({}): lower --start or --seeds",
            u64::MAX
        );
    }
    Ok(())
}

fn real_main() -> Result<bool> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .context("workspace root")?;
    let o = Cli::parse().options(&root);
    check_range(o.start, o.seeds)?;
    let work = root.join("target/sched-diff");

    // per-process arm directories: concurrent runs must not swap each other's libraries.
    // First of all: a file that is not a libggml-base is named in one line, before anything
    // is fetched or compiled against it.
    let arms = work.join(format!("run-{}", std::process::id()));
    let _cleanup = RemoveOnDrop(arms.clone());
    let mut arm_a = Arm::new("A", &o.a, &arms)?;
    let mut arm_b = Arm::new("B", &o.b, &arms)?;

    let pins = pins::Pins::load(&root)?;
    // the extracted tree is enough; fetch and verify only when it is missing
    let cache = root.join("target");
    let mut llama = pins.upstream_dir(&cache);
    if !llama.join("ggml/include/ggml.h").exists() {
        llama = pins.ensure_upstream(&cache)?;
    }
    let layout = match o.b_layout {
        LayoutArg::Stock => "stock",
        LayoutArg::Packed => "packed",
    };
    arm_b.env.push(("GGML_ALLOC_LAYOUT".into(), layout.into()));
    arm_a.env.clear();
    // the self-test also kills arm B inside one perturbed seed, to show crash isolation
    let crash_seed = (o.start + 1..o.start + o.seeds).find(|s| s % PERTURB_EVERY == 0);
    if o.self_test {
        arm_b
            .env
            .push(("SCHED_DIFF_PERTURB".into(), PERTURB_EVERY.to_string()));
        if let Some(s) = crash_seed {
            arm_b
                .env
                .push(("SCHED_DIFF_CRASH_SEED".into(), s.to_string()));
        }
    }
    let src = root.join("cabi-tests/sched-diff/sched_diff.c");
    let prog = program::compile(&src, &llama.join("ggml"), &arm_a.dir, &work)?;

    if let Some(note) = preload_note(std::env::var_os("LD_PRELOAD").as_deref()) {
        eprintln!("{note}");
    }
    println!("sched-diff: {}", describe_arm(&prog, &arm_a)?);
    println!("sched-diff: {}", describe_arm(&prog, &arm_b)?);
    let same_lib = pins::sha256_file(&arm_a.lib)? == pins::sha256_file(&arm_b.lib)?;
    let expect_b_clean = match o.b_inplace {
        InplacePolicy::Auto => !same_lib,
        InplacePolicy::Expect => true,
        InplacePolicy::Ignore => false,
    };

    let t0 = Instant::now();
    let arms = Arms {
        b_off: arm_b.with_rule_off(),
        b_plain: o.self_test.then(|| arm_b.without_self_test()),
        b_plain_off: o
            .self_test
            .then(|| arm_b.without_self_test().with_rule_off()),
        a: arm_a,
        b: arm_b,
    };
    let pairs = run_all(&prog, &arms, &o)?;
    let secs = t0.elapsed().as_secs_f64();

    let count = |f: &dyn Fn(&Pair) -> bool| pairs.iter().filter(|p| f(p)).count();
    let identical = count(&|p| !p.verdict.differs());
    let both_crashed = count(&|p| p.verdict == Verdict::IdenticalBothCrashed);
    let differing = count(&|p| p.verdict.differs());
    let moved = count(&|p| p.verdict == Verdict::ExplainedMoved);
    let refused = count(&|p| p.verdict == Verdict::ExplainedRefused);
    let unexplained: Vec<&Pair> = pairs
        .iter()
        .filter(|p| p.verdict == Verdict::Unexplained)
        .collect();
    let crash_a = count(&|p| p.a.crash.is_some());
    let crash_b = count(&|p| p.b.crash.is_some());
    let conflict_a = count(&|p| has_inplace_conflict(&p.a.lines));
    let unusable_a = count(&|p| has_unusable_write(&p.a.lines));
    let unusable_b = count(&|p| has_unusable_write(&p.b.lines));
    let read_a = count(&|p| has_unusable_read(&p.a.lines));
    let read_b = count(&|p| has_unusable_read(&p.b.lines));
    let view_copy_a = count(&|p| has_view_copy(&p.a.lines));
    let view_copy_b = count(&|p| has_view_copy(&p.b.lines));
    let stale_a = count(&|p| has_stale_reread(&p.a.lines));
    let stale_b = count(&|p| has_stale_reread(&p.b.lines));
    let conflict_b: Vec<&Pair> = pairs
        .iter()
        .filter(|p| has_inplace_conflict(&p.b.lines))
        .collect();

    let perturbed = |s: u64| o.self_test && s % PERTURB_EVERY == 0;
    let failed = count(&|p| seed_fails(p, expect_b_clean, perturbed(p.a.seed)));
    let passed = pairs.len() - failed;

    println!(
        "seeds run: {} (from {}) in {:.1} s with {} jobs",
        pairs.len(),
        o.start,
        secs,
        o.jobs
    );
    println!("identical: {identical} (both arms aborted identically: {both_crashed})");
    println!("differing: {differing}");
    println!(
        "  explained by the in-place rule: {} (B moved the writer: {moved}, B refused with an in-place message: {refused})",
        moved + refused
    );
    let rerun = count(&|p| p.b_off.is_some());
    let rerun_differs = count(&|p| {
        p.b_off
            .as_ref()
            .is_some_and(|off| !matches_parity(&p.a, off, o.b_layout == LayoutArg::Packed))
    });
    println!(
        "    (each checked by running B again with GGML_SCHED_INPLACE_RULE=0, which must match A: {rerun} seeds rerun, {} matched, {rerun_differs} did not and are unexplained)",
        rerun - rerun_differs
    );
    let layout_explained = count(&|p| p.verdict == Verdict::ExplainedLayout);
    let total = |f: &dyn Fn(&Pair) -> &SeedRun| -> u64 {
        pairs
            .iter()
            .flat_map(|p| buffer_sizes(&f(p).lines).into_iter().map(|(_, n)| n))
            .sum()
    };
    let (bytes_a, bytes_b) = (total(&|p| &p.a), total(&|p| &p.b));
    println!(
        "  explained by B's {layout} allocation layout (only DATA, ALLOCBUF, BUFSIZE differ; no B buffer larger): {layout_explained}; compute buffers in all seeds: A {bytes_a} bytes, B {bytes_b} bytes, B/A {:.4}",
        bytes_b as f64 / bytes_a.max(1) as f64
    );
    println!("  unexplained: {}", unexplained.len());
    let data_explained =
        count(&|p| p.verdict != Verdict::Unexplained && data_differs(&p.a.lines, &p.b.lines));
    let data_unexplained = unexplained
        .iter()
        .filter(|p| data_differs(&p.a.lines, &p.b.lines))
        .count();
    let alloc_only = unexplained
        .iter()
        .filter(|p| differs_only_in_allocation(&p.a, &p.b))
        .count();
    println!(
        "  where some tensor's data lives (DATA records) differs: {} seeds ({data_explained} explained, {data_unexplained} unexplained)",
        data_explained + data_unexplained
    );
    println!(
        "  unexplained with the same decisions, only ggml-alloc's records differing (DATA, ALLOCBUF, BUFSIZE): {alloc_only}"
    );
    println!("crashes: A {crash_a}, B {crash_b}");
    println!(
        "in-place hazards (rule=violated or usable=no, writes or reads): A in {conflict_a} seeds, B in {} seeds ({})",
        conflict_b.len(),
        if expect_b_clean {
            "each fails: B must enforce the in-place rule"
        } else {
            "not failures: --b-inplace ignore, or B is the same library as A"
        }
    );
    println!(
        "  of which a writer cannot use the written buffer type (usable=no): A in {unusable_a} seeds, B in {unusable_b} seeds"
    );
    println!(
        "  of which a node reads memory its backend cannot use (READ lines, usable=no or rule=violated): A in {read_a} seeds, B in {read_b} seeds"
    );
    println!(
        "  of which a node reads a copy of a view whose root its backend could use (VIEWCOPY lines: stale when its split computes the root, else needless): A in {view_copy_a} seeds, B in {view_copy_b} seeds"
    );
    println!(
        "  of which a node reads a copy not filled again after its source was written in place (REREAD lines and the COMPUTE trace): A in {stale_a} seeds, B in {stale_b} seeds"
    );
    let reuse_b = conflict_b
        .iter()
        .filter(|p| hazards_only_via_reuse(&p.b.lines))
        .count();
    println!(
        "  of which only through ggml-alloc reusing a parent's memory in another backend's buffer (root_alloc=reused, rule=ok): B in {reuse_b} seeds"
    );
    if expect_b_clean && !conflict_b.is_empty() {
        let list: Vec<String> = conflict_b
            .iter()
            .take(20)
            .map(|p| p.b.seed.to_string())
            .collect();
        println!("  B conflict seeds (first 20): {}", list.join(" "));
        if let Some(p) = conflict_b.first() {
            for l in p.b.lines.iter().filter(|l| {
                l.ends_with(" rule=violated")
                    || l.contains(" usable=no ")
                    || l.starts_with("READ ")
                    || l.starts_with("VIEWCOPY ")
                    || l.starts_with("REREAD ")
            }) {
                println!("  seed {}: {l}", p.b.seed);
            }
        }
    }
    if !unexplained.is_empty() {
        let list: Vec<String> = unexplained
            .iter()
            .take(30)
            .map(|p| p.a.seed.to_string())
            .collect();
        println!("unexplained seeds (first 30): {}", list.join(" "));
        println!(
            "first {} unexplained differences:",
            o.show.min(unexplained.len())
        );
        for p in unexplained.iter().take(o.show) {
            print_pair(p);
        }
    }

    // with --self-test, a problem of the run as a whole (no seed to charge it to)
    let mut run_problem = None;
    if o.self_test {
        let planted: Vec<&Pair> = pairs
            .iter()
            .filter(|p| perturbed(p.a.seed) && planted_changed_b(p))
            .collect();
        let caught = planted
            .iter()
            .filter(|p| p.verdict == Verdict::Unexplained)
            .count();
        let missed: Vec<String> = planted
            .iter()
            .filter(|p| p.verdict != Verdict::Unexplained)
            .take(30)
            .map(|p| format!("{} ({:?})", p.a.seed, p.verdict))
            .collect();
        if !missed.is_empty() {
            println!(
                "self-test: planted perturbations not reported as unexplained (first 30): {}",
                missed.join(", ")
            );
        }
        let n_perturbed = pairs.iter().filter(|p| perturbed(p.a.seed)).count();
        let outside = count(&|p| {
            !(perturbed(p.a.seed) && planted_changed_b(p)) && seed_fails(p, expect_b_clean, false)
        });
        // the crashed seed is recorded, and the seeds after it still ran in B
        let isolated = match crash_seed {
            Some(cs) => {
                crash_b == 1
                    && pairs.iter().any(|p| {
                        p.b.seed == cs && p.b.crash.is_some() && p.verdict == Verdict::Unexplained
                    })
                    && pairs.len() as u64 == o.seeds
            }
            None => true,
        };
        run_problem = self_test_problem(planted.len(), isolated);
        println!(
            "self-test: caught {caught} of {} planted perturbations (perturbed seeds: {n_perturbed}; in {} of them the perturbation left B's output as it is without it, invisible by design); failed seeds outside them: {outside}; crash in seed {} isolated: {isolated}; {}",
            planted.len(),
            n_perturbed - planted.len(),
            crash_seed.map_or("-".to_string(), |s| s.to_string()),
            if failed == 0 && run_problem.is_none() {
                "PASS"
            } else {
                "FAIL"
            }
        );
    }
    let (line, ok) = summary(passed, failed, run_problem.as_deref());
    println!("{line}");
    Ok(ok)
}

/// Whether a seed fails. A seed the self-test perturbed (`planted`: the perturbation
/// changed B's output) fails unless it is reported unexplained (the detector missed it);
/// any other seed fails when its difference is unexplained, or when B shows an in-place
/// hazard and B must have none (`expect_b_clean`).
fn seed_fails(p: &Pair, expect_b_clean: bool, perturbed: bool) -> bool {
    if perturbed && planted_changed_b(p) {
        return p.verdict != Verdict::Unexplained;
    }
    p.verdict == Verdict::Unexplained || (expect_b_clean && has_inplace_conflict(&p.b.lines))
}

/// Whether the self-test's perturbation changed what B printed for this seed: B differs
/// from B's run without the perturbation ([`Arms::b_plain`]). False without that run.
fn planted_changed_b(p: &Pair) -> bool {
    p.b_plain
        .as_ref()
        .is_some_and(|plain| !same_output(plain, &p.b))
}

/// Whether two runs of one seed printed the same records and both crashed or neither did.
fn same_output(x: &SeedRun, y: &SeedRun) -> bool {
    x.lines == y.lines && x.crash.is_some() == y.crash.is_some()
}

/// What fails a self-test as a whole beyond its seeds: no perturbation changed B (the run
/// proved nothing), or the planted crash was not confined to its seed.
fn self_test_problem(planted: usize, isolated: bool) -> Option<String> {
    match (planted, isolated) {
        (0, _) => Some("self-test: no perturbation changed B's output".to_string()),
        (_, false) => Some("self-test: the planted crash was not confined to its seed".to_string()),
        _ => None,
    }
}

/// The last line and the run's result: it passes only when no seed failed and nothing
/// failed the run as a whole, and the line says so in either case.
fn summary(passed: usize, failed: usize, problem: Option<&str>) -> (String, bool) {
    match problem {
        None => (format!("{passed} passed, {failed} failed"), failed == 0),
        Some(why) => (
            format!("{passed} passed, {failed} failed; FAIL: {why}"),
            false,
        ),
    }
}

fn main() {
    // A reader that goes away (`sched-diff ... | head`) ends the run as it ends any Unix
    // tool, by SIGPIPE, instead of a panic in the next print ("Broken pipe"). Rust starts a
    // program with SIGPIPE ignored; the drivers it starts get the default from `Command`.
    // SAFETY: setting a signal's disposition to the default, before any other thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    // First, while this is the only thread: the folder the user's relative paths are taken
    // from (bundle::caller_path), for the arguments parsed in real_main.
    bundle::take_caller_dir();
    match real_main() {
        Ok(true) => std::process::exit(0),
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("sched-diff: error: {e:#}");
            std::process::exit(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        let argv = std::iter::once("sched-diff").chain(args.iter().copied());
        Cli::try_parse_from(argv).map(|c| c.options(Path::new("/ws")))
    }

    #[test]
    fn a_range_of_no_seeds_or_past_the_last_seed_is_refused() {
        assert_eq!(
            parse(&["--seeds", "0"]).unwrap_err().kind(),
            ErrorKind::ValueValidation
        );
        let o = parse(&["--start", &u64::MAX.to_string(), "--seeds", "10"]).unwrap();
        let e = check_range(o.start, o.seeds).unwrap_err().to_string();
        assert!(
            e.contains("--start") && e.contains("passes the last seed"),
            "{e}"
        );
        assert!(check_range(u64::MAX - 10, 10).is_ok());
    }

    #[test]
    fn defaults_are_the_stock_and_our_libraries() {
        let o = parse(&[]).unwrap();
        assert_eq!(
            o.a,
            Path::new("/ws/target/llama-stock/bin/libggml-base.so.0")
        );
        assert_eq!(o.b, Path::new("/ws/target/ours/lib/libggml-base.so.0"));
        assert_eq!((o.seeds, o.start, o.show), (500, 0, 3));
        assert_eq!(o.timeout, Duration::from_secs(120));
        assert_eq!(o.chunk, None);
        assert!(o.jobs >= 1);
        assert_eq!(o.b_inplace, InplacePolicy::Auto);
        assert!(!o.self_test);
    }

    /// The test suite's step (`ab sched-diff --seeds 2000`, crates/ab/src/test_steps.rs).
    #[test]
    fn the_test_suite_command_line() {
        let o = parse(&["--seeds", "2000"]).unwrap();
        assert_eq!(o.seeds, 2000);
        assert_eq!(o.start, 0);
    }

    /// Every flag docs/sched-diff.md names, in one command line.
    #[test]
    fn every_flag() {
        let o = parse(&[
            "--a",
            "/x/a.so",
            "--b",
            "/x/b.so",
            "--seeds",
            "1",
            "--start",
            "38",
            "--jobs",
            "0",
            "--chunk",
            "0",
            "--show",
            "7",
            "--timeout-s",
            "9",
            "--b-inplace",
            "ignore",
        ])
        .unwrap();
        assert_eq!(o.a, Path::new("/x/a.so"));
        assert_eq!(o.b, Path::new("/x/b.so"));
        assert_eq!((o.seeds, o.start, o.show), (1, 38, 7));
        // 0 workers or 0 seeds a chunk would never finish: both mean 1, as before.
        assert_eq!(o.jobs, 1);
        assert_eq!(o.chunk, Some(1));
        assert_eq!(o.timeout, Duration::from_secs(9));
        assert_eq!(o.b_inplace, InplacePolicy::Ignore);
    }

    #[test]
    fn self_test_compares_arm_a_with_itself() {
        let o = parse(&["--self-test", "--a", "/x/a.so"]).unwrap();
        assert!(o.self_test);
        assert_eq!(o.b, Path::new("/x/a.so"));
        let o = parse(&["--self-test", "--b", "/x/b.so"]).unwrap();
        assert_eq!(o.b, Path::new("/x/b.so"));
    }

    #[test]
    fn a_repeated_flag_takes_its_last_value() {
        assert_eq!(parse(&["--seeds", "5", "--seeds", "6"]).unwrap().seeds, 6);
    }

    #[test]
    fn bad_values_are_usage_errors() {
        let e = parse(&["--seeds", "many"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        assert!(e.to_string().contains("'many'"), "{e}");
        assert!(e.to_string().contains("--seeds"), "{e}");
        let e = parse(&["--b-inplace", "sometimes"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
        assert!(
            e.to_string()
                .contains("[possible values: auto, expect, ignore]"),
            "{e}"
        );
        let e = parse(&["--seed", "3"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnknownArgument);
        // clap exits with 2 on every usage error: the status this tool documents.
        assert_eq!(e.exit_code(), 2);
    }

    fn seed_run(seed: u64, lines: &[&str]) -> SeedRun {
        SeedRun {
            seed,
            lines: lines.iter().map(|s| s.to_string()).collect(),
            crash: None,
        }
    }

    fn pair(b: &[&str], plain: Option<&[&str]>, verdict: Verdict) -> Pair {
        Pair {
            a: seed_run(49, &["NODE 0 t1 ADD T0"]),
            b: seed_run(49, b),
            b_plain: plain.map(|l| seed_run(49, l)),
            b_off: None,
            verdict,
        }
    }

    /// The review's case: the self-test perturbed seed 49, the perturbation changed B, and
    /// the seed was excused (not unexplained). That seed fails, so the run does: the
    /// summary line and the exit status say the same.
    #[test]
    fn a_missed_perturbation_fails_the_seed_and_the_run() {
        let missed = pair(
            &["NODE 0 t1 ADD T1"],
            Some(&["NODE 0 t1 ADD T0"]),
            Verdict::ExplainedMoved,
        );
        assert!(planted_changed_b(&missed));
        assert!(seed_fails(&missed, false, true));
        let (line, ok) = summary(0, 1, None);
        assert_eq!(line, "0 passed, 1 failed");
        assert!(!ok);
        // caught: the seed passes
        let caught = pair(
            &["NODE 0 t1 ADD T1"],
            Some(&["NODE 0 t1 ADD T0"]),
            Verdict::Unexplained,
        );
        assert!(!seed_fails(&caught, false, true));
        assert_eq!(
            summary(1, 0, None),
            ("1 passed, 0 failed".to_string(), true)
        );
        // a perturbation that left B as it was: the seed is judged as any other
        let unchanged = pair(
            &["NODE 0 t1 ADD T0"],
            Some(&["NODE 0 t1 ADD T0"]),
            Verdict::Identical,
        );
        assert!(!planted_changed_b(&unchanged));
        assert!(!seed_fails(&unchanged, false, true));
        let unchanged_but_unexplained = pair(
            &["NODE 0 t1 ADD T2"],
            Some(&["NODE 0 t1 ADD T2"]),
            Verdict::Unexplained,
        );
        assert!(seed_fails(&unchanged_but_unexplained, false, true));
        // outside the self-test an unexplained seed fails, an explained one passes
        assert!(seed_fails(&caught, false, false));
        assert!(!seed_fails(&missed, false, false));
    }

    /// A self-test in which no perturbation changed B proved nothing; its seeds all pass,
    /// yet the run fails, and the last line says why.
    #[test]
    fn a_self_test_that_planted_nothing_fails_and_says_so() {
        let why = self_test_problem(0, true).unwrap();
        let (line, ok) = summary(5, 0, Some(&why));
        assert_eq!(
            line,
            "5 passed, 0 failed; FAIL: self-test: no perturbation changed B's output"
        );
        assert!(!ok);
        assert!(self_test_problem(3, false)
            .unwrap()
            .contains("crash was not confined"));
        assert_eq!(self_test_problem(3, true), None);
    }

    #[test]
    fn an_ld_preload_is_named_once() {
        let note = preload_note(Some(std::ffi::OsStr::new("/tmp/stock-copy.so"))).unwrap();
        assert_eq!(
            note,
            "sched-diff: LD_PRELOAD=/tmp/stock-copy.so is not passed to the arms (its functions would come before the library under test)"
        );
        assert_eq!(preload_note(Some(std::ffi::OsStr::new(""))), None);
        assert_eq!(preload_note(None), None);
    }
}
