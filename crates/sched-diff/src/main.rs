//! `sched-diff`: the scheduler differential test.
//!
//! Compiles the C driver `cabi-tests/sched-diff/sched_diff.c`, runs it over a range of
//! seeds against two `libggml-base.so.0` files (arm A, by default the stock build; arm B,
//! by default ours), and compares, seed by seed, what the two `ggml_backend_sched_*`
//! implementations decided: node placement, split inputs, splits, buffer sizes, the
//! compute dispatch and the data copies. See `docs/sched-diff.md`.
//!
//! Exit status: 0 when every seed passed (or, with `--self-test`, when the detector
//! caught the perturbation and nothing else), 1 otherwise, 2 on a usage or setup error.

mod outcome;
mod program;

use anyhow::{bail, Context, Result};
use outcome::{
    classify, has_inplace_conflict, has_unusable_write, hazards_only_via_reuse, SeedRun, Verdict,
};
use program::{Arm, Program};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The self-test perturbs every seed divisible by this in arm B.
const PERTURB_EVERY: u64 = 7;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InplacePolicy {
    /// Expect no in-place conflict in B unless A and B are the same file content.
    Auto,
    /// Every seed where B shows an in-place conflict fails.
    Expect,
    /// Report B's conflicts, fail nothing for them.
    Ignore,
}

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
}

const USAGE: &str = "\
usage: sched-diff [--a LIB_A] [--b LIB_B] [--seeds N] [--start S] [--jobs J]
                  [--chunk C] [--show K] [--timeout-s T] [--b-inplace auto|expect|ignore]
                  [--self-test]

  --a LIB_A      arm A library (default target/llama-stock/bin/libggml-base.so.0)
  --b LIB_B      arm B library (default target/ours/lib/libggml-base.so.0;
                 with --self-test the default is LIB_A)
  --seeds N      number of seeds (default 500)
  --start S      first seed (default 0)
  --jobs J       parallel workers (default: available CPUs)
  --chunk C      seeds per driver process (default: seeds / (8 * jobs), 25..500)
  --show K       unexplained differences printed in full (default 3)
  --timeout-s T  limit per driver process (default 120)
  --b-inplace P  in-place conflicts in arm B: expect none (expect), report only
                 (ignore), or expect none unless A and B are the same file (auto, default)
  --self-test    run B with SCHED_DIFF_PERTURB=7 (a silent extra backend assignment in
                 every 7th seed) and SCHED_DIFF_CRASH_SEED (a SIGSEGV in one of them); pass
                 only if those differences, and no others, are caught and the crash is
                 confined to its seed
";

fn parse_args(root: &Path) -> Result<Options> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_env();
    let mut a = None;
    let mut b = None;
    let mut o = Options {
        a: PathBuf::new(),
        b: PathBuf::new(),
        seeds: 500,
        start: 0,
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
        chunk: None,
        show: 3,
        timeout: Duration::from_secs(120),
        self_test: false,
        b_inplace: InplacePolicy::Auto,
    };
    while let Some(arg) = parser.next()? {
        match arg {
            Long("a") => a = Some(PathBuf::from(parser.value()?)),
            Long("b") => b = Some(PathBuf::from(parser.value()?)),
            Long("seeds") => o.seeds = parser.value()?.parse()?,
            Long("start") => o.start = parser.value()?.parse()?,
            Long("jobs") => o.jobs = parser.value()?.parse::<usize>()?.max(1),
            Long("chunk") => o.chunk = Some(parser.value()?.parse::<u64>()?.max(1)),
            Long("show") => o.show = parser.value()?.parse()?,
            Long("timeout-s") => o.timeout = Duration::from_secs(parser.value()?.parse()?),
            Long("self-test") => o.self_test = true,
            Long("b-inplace") => {
                o.b_inplace = match parser.value()?.string()?.as_str() {
                    "auto" => InplacePolicy::Auto,
                    "expect" => InplacePolicy::Expect,
                    "ignore" => InplacePolicy::Ignore,
                    other => bail!("--b-inplace: unknown policy {other}"),
                }
            }
            Short('h') | Long("help") => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(arg.unexpected().into()),
        }
    }
    o.a = a.unwrap_or_else(|| root.join("target/llama-stock/bin/libggml-base.so.0"));
    o.b = match b {
        Some(b) => b,
        None if o.self_test => o.a.clone(),
        None => root.join("target/ours/lib/libggml-base.so.0"),
    };
    Ok(o)
}

/// One seed's results in both arms.
struct Pair {
    a: SeedRun,
    b: SeedRun,
    verdict: Verdict,
}

fn run_all(prog: &Program, arm_a: &Arm, arm_b: &Arm, o: &Options) -> Result<Vec<Pair>> {
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
                let res = program::run_range(prog, arm_a, start, count, o.timeout).and_then(|ra| {
                    program::run_range(prog, arm_b, start, count, o.timeout).map(|rb| (ra, rb))
                });
                match res {
                    Ok((ra, rb)) => {
                        let pairs = ra.into_iter().zip(rb).map(|(a, b)| {
                            let verdict = classify(&a, &b);
                            Pair { a, b, verdict }
                        });
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
    let mapped = program::mapped_libs(prog, arm)?;
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
    Ok(format!(
        "arm {}: {} (sha256 {})\n       mapped by the driver: {}",
        arm.label,
        arm.lib.display(),
        sha,
        base[0].display()
    ))
}

fn print_pair(p: &Pair) {
    println!(
        "---- seed {} ({:?}); rerun alone: sched-diff --a A --b B --start {} --seeds 1",
        p.a.seed, p.verdict, p.a.seed
    );
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

fn real_main() -> Result<bool> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .context("workspace root")?;
    let o = parse_args(&root)?;
    let work = root.join("target/sched-diff");

    let pins = pins::Pins::load(&root)?;
    // the extracted tree is enough; fetch and verify only when it is missing
    let cache = root.join("target");
    let mut llama = pins.upstream_dir(&cache);
    if !llama.join("ggml/include/ggml.h").exists() {
        llama = pins.ensure_upstream(&cache)?;
    }
    // per-process arm directories: concurrent runs must not swap each other's libraries
    let arms = work.join(format!("run-{}", std::process::id()));
    let _cleanup = RemoveOnDrop(arms.clone());
    let mut arm_a = Arm::new("A", &o.a, &arms)?;
    let mut arm_b = Arm::new("B", &o.b, &arms)?;
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

    println!("sched-diff: {}", describe_arm(&prog, &arm_a)?);
    println!("sched-diff: {}", describe_arm(&prog, &arm_b)?);
    let same_lib = pins::sha256_file(&arm_a.lib)? == pins::sha256_file(&arm_b.lib)?;
    let expect_b_clean = match o.b_inplace {
        InplacePolicy::Auto => !same_lib,
        InplacePolicy::Expect => true,
        InplacePolicy::Ignore => false,
    };

    let t0 = Instant::now();
    let pairs = run_all(&prog, &arm_a, &arm_b, &o)?;
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
    let conflict_b: Vec<&Pair> = pairs
        .iter()
        .filter(|p| has_inplace_conflict(&p.b.lines))
        .collect();

    let failed_seed = |p: &Pair| {
        p.verdict == Verdict::Unexplained || (expect_b_clean && has_inplace_conflict(&p.b.lines))
    };
    let failed = count(&|p| failed_seed(p));
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
    println!("  unexplained: {}", unexplained.len());
    println!("crashes: A {crash_a}, B {crash_b}");
    println!(
        "in-place hazards (rule=violated or usable=no): A in {conflict_a} seeds, B in {} seeds ({})",
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
            for l in
                p.b.lines
                    .iter()
                    .filter(|l| l.ends_with(" rule=violated") || l.contains(" usable=no "))
            {
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

    let ok = if o.self_test {
        let perturbed = |s: u64| s % PERTURB_EVERY == 0;
        let caught = unexplained.iter().filter(|p| perturbed(p.a.seed)).count();
        let outside = count(&|p| p.verdict.differs() && !perturbed(p.a.seed));
        let n_perturbed = pairs.iter().filter(|p| perturbed(p.a.seed)).count();
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
        let ok = caught > 0 && outside == 0 && isolated;
        println!(
            "self-test: caught {caught} of {n_perturbed} perturbed seeds (a perturbation that does not change the schedule is invisible by design); differences outside them: {outside}; crash in seed {} isolated: {isolated}; {}",
            crash_seed.map_or("-".to_string(), |s| s.to_string()),
            if ok { "PASS" } else { "FAIL" }
        );
        ok
    } else {
        failed == 0
    };
    println!("{passed} passed, {failed} failed");
    Ok(ok)
}

fn main() {
    match real_main() {
        Ok(true) => std::process::exit(0),
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("sched-diff: error: {e:#}");
            std::process::exit(2);
        }
    }
}
