//! `repro prop`: the numeric property test of the in-place storage rule (issue 5, item 6).
//!
//! ```text
//! cargo run --release -p repro -- prop [--seeds N] [--start S] [--arm ours|stock] [--chunk C]
//!     [--stock-dir DIR] [--ours-dir DIR] [--hrx FILE] [--timeout SECS]
//! ```
//!
//! Compiles `cabi-tests/inplace-repro/inplace_prop.c` (into `target/repro/inplace_prop`) and
//! runs seeds `[S, S+N)` in chunks of `C` seeds, one child process per chunk, with the arm's
//! `libggml-base.so.0` first on `LD_LIBRARY_PATH` and the HRX backend loaded through
//! `GGML_BACKEND_PATH`. Per seed the program chooses the ops HRX0 withdraws from its eager set,
//! builds a random F32 graph, checks the placement property after `ggml_backend_sched_alloc_graph`
//! and compares every output computed through the scheduler over `[HRX0, CPU]` with the CPU
//! alone (NMSE <= 1e-6). Prints one line per failing seed (with its detail lines), one line per
//! chunk that crashed (every seed of it not reported passed counts as failed) and a final
//! `N passed, M failed` line. Exit status 0 only when every seed passed; 1 on a failure; 2 when
//! the tool cannot run. The `stock` arm is the negative control: it is expected to fail (and
//! may crash by SIGSEGV); its crash count is reported.

use crate::child::{self, End};
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

struct Opts {
    seeds: u64,
    start: u64,
    arm: String,
    chunk: u64,
    stock_dir: Option<PathBuf>,
    ours_dir: Option<PathBuf>,
    hrx: Option<PathBuf>,
    timeout: Duration,
}

fn usage() -> &'static str {
    "usage: repro prop [--seeds N] [--start S] [--arm ours|stock] [--chunk C] [--stock-dir DIR] \
     [--ours-dir DIR] [--hrx FILE] [--timeout SECS]"
}

fn parse_opts(args: &[String]) -> Result<Opts> {
    let mut o = Opts {
        seeds: 2000,
        start: 0,
        arm: "ours".into(),
        chunk: 500,
        stock_dir: None,
        ours_dir: None,
        hrx: None,
        timeout: Duration::from_secs(300),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .with_context(|| format!("{a} needs a value\n{}", usage()))
        };
        match a.as_str() {
            "--seeds" => o.seeds = val()?.parse().context("--seeds")?,
            "--start" => o.start = val()?.parse().context("--start")?,
            "--arm" => o.arm = val()?,
            "--chunk" => o.chunk = val()?.parse().context("--chunk")?,
            "--stock-dir" => o.stock_dir = Some(PathBuf::from(val()?)),
            "--ours-dir" => o.ours_dir = Some(PathBuf::from(val()?)),
            "--hrx" => o.hrx = Some(PathBuf::from(val()?)),
            "--timeout" => o.timeout = Duration::from_secs(val()?.parse().context("--timeout")?),
            "-h" | "--help" => {
                println!("{}", usage());
                std::process::exit(0);
            }
            _ => bail!("unknown argument {a}\n{}", usage()),
        }
    }
    if o.arm != "ours" && o.arm != "stock" {
        bail!("unknown arm {} (ours, stock)", o.arm);
    }
    if o.chunk == 0 {
        bail!("--chunk must be at least 1");
    }
    Ok(o)
}

fn real_main(args: &[String]) -> Result<bool> {
    let o = parse_opts(args)?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .context("workspace root")?;
    let target = root.join("target");
    let out_dir = target.join("repro");
    let logs = out_dir.join("logs");
    fs::create_dir_all(&logs)?;
    let pins = pins::Pins::load(&root)?;
    let upstream = pins.ensure_upstream(&target)?;
    let stock_bin = o
        .stock_dir
        .clone()
        .unwrap_or_else(|| target.join("llama-stock/bin"));
    for f in ["libggml-base.so.0", "libggml.so.0", "libggml-cpu.so.0"] {
        if !stock_bin.join(f).exists() {
            bail!("the stock build has no {}", stock_bin.join(f).display());
        }
    }
    let hrx = o
        .hrx
        .clone()
        .unwrap_or_else(|| target.join("release/libggml_hrx.so"));
    if !hrx.exists() {
        bail!("no HRX library {} (build it, or --hrx)", hrx.display());
    }
    let ld = if o.arm == "stock" {
        stock_bin.display().to_string()
    } else {
        let ours = o
            .ours_dir
            .clone()
            .unwrap_or_else(|| target.join("ours/lib"));
        if !ours.join("libggml-base.so.0").exists() {
            bail!(
                "no {} (run `ab build-ours`)",
                ours.join("libggml-base.so.0").display()
            );
        }
        format!("{}:{}", ours.display(), stock_bin.display())
    };
    let program = out_dir.join("inplace_prop");
    crate::build_program(&root, "inplace_prop.c", &upstream, &stock_bin, &program)?;

    let (mut passed, mut failed, mut crashed) = (0u64, 0u64, 0u64);
    let end_seed = o.start.saturating_add(o.seeds);
    let mut first = o.start;
    while first < end_seed {
        let count = o.chunk.min(end_seed - first);
        let mut cmd = Command::new(&program);
        cmd.args(["--start", &first.to_string(), "--count", &count.to_string()])
            .env("LD_LIBRARY_PATH", &ld)
            .env("GGML_BACKEND_PATH", &hrx)
            .env("GGML_NO_BACKTRACE", "1")
            .env_remove("GGML_HRX_EAGER_OPS")
            .env_remove("LD_PRELOAD");
        let stem = logs.join(format!("prop-{}-{first}", o.arm));
        let fin = child::run_logged(cmd, &stem, o.timeout)?;
        // Failing seeds and their detail lines.
        for l in fin.stdout.lines() {
            if (l.starts_with("seed ") && l.contains(" FAIL")) || l.starts_with("  ") {
                println!("{l}");
            }
        }
        let summary = fin.stdout.lines().rev().find_map(|l| {
            let (p, rest) = l.split_once(" passed, ")?;
            let f = rest.strip_suffix(" failed")?;
            Some((p.parse::<u64>().ok()?, f.parse::<u64>().ok()?))
        });
        match (&fin.end, summary) {
            (End::Exit(0 | 1), Some((p, f))) if p + f == count => {
                passed += p;
                failed += f;
            }
            _ => {
                crashed += 1;
                let reported = fin
                    .stdout
                    .lines()
                    .filter(|l| l.starts_with("seed ") && l.contains(" FAIL"))
                    .count() as u64;
                println!(
                    "chunk seeds [{first}, {}) ended {} (logs {}): {} seeds reported failing, the rest of the chunk counts as failed",
                    first + count,
                    fin.end.describe(),
                    fin.logs.0.display(),
                    reported
                );
                failed += count;
            }
        }
        first += count;
    }
    if crashed > 0 {
        println!("{crashed} chunk(s) crashed or did not finish");
    }
    println!("{passed} passed, {failed} failed");
    Ok(failed == 0)
}

/// Entry point of `repro prop ARGS...`.
pub fn main(args: &[String]) -> ExitCode {
    match real_main(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("repro prop: {e:#}");
            ExitCode::from(2)
        }
    }
}
