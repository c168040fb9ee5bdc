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
use clap::Args;
use std::fs;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Duration;

/// The options of `repro prop`.
#[derive(Args, Debug)]
pub struct PropArgs {
    /// Number of seeds (at least 1).
    #[arg(long, value_name = "N", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// First seed.
    #[arg(long, value_name = "S", default_value_t = 0)]
    start: u64,
    /// The arm: ours, or the negative control stock (expected to fail).
    #[arg(long, default_value = "ours", value_parser = ["ours", "stock"])]
    arm: String,
    /// Seeds per child process (at least 1).
    #[arg(long, value_name = "C", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    chunk: u64,
    #[command(flatten)]
    libs: crate::LibDirs,
    /// Limit per child process, in seconds (at least 1: 0 would time every run out).
    #[arg(long, value_name = "SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
}

/// The seeds `[start, start + seeds)`, refused when the end does not fit in a u64 (it
/// would otherwise be cut short at u64::MAX and fewer seeds run than asked, silently).
fn seed_end(start: u64, seeds: u64) -> Result<u64> {
    start.checked_add(seeds).with_context(|| {
        format!(
            "--start {start} --seeds {seeds}: the last seed would be past {}",
            u64::MAX
        )
    })
}

fn real_main(o: PropArgs) -> Result<bool> {
    let end_seed = seed_end(o.start, o.seeds)?;
    let timeout = Duration::from_secs(o.timeout);
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
        .libs
        .stock_dir
        .clone()
        .unwrap_or_else(|| target.join("llama-stock/bin"));
    for f in ["libggml-base.so.0", "libggml.so.0", "libggml-cpu.so.0"] {
        if !stock_bin.join(f).exists() {
            bail!("the stock build has no {}", stock_bin.join(f).display());
        }
    }
    let hrx = o
        .libs
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
            .libs
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
    let mut first = o.start;
    while first < end_seed {
        let count = o.chunk.min(end_seed - first);
        let mut cmd = Command::new(&program);
        cmd.args(["--start", &first.to_string(), "--count", &count.to_string()])
            .env("LD_LIBRARY_PATH", &ld)
            .env("GGML_BACKEND_PATH", &hrx)
            .env("GGML_NO_BACKTRACE", "1")
            // the NMSE bound is the CPU kernels' (the simulator runs them); on a machine
            // with a GPU `auto` would take the CUDA runtime
            .env(
                "GGML_HRX_RUNTIME",
                std::env::var("GGML_HRX_RUNTIME").unwrap_or_else(|_| "sim".into()),
            )
            .env_remove("GGML_HRX_EAGER_OPS")
            .env_remove("LD_PRELOAD");
        let stem = logs.join(format!("prop-{}-{first}", o.arm));
        let fin = child::run_logged(cmd, &stem, timeout)?;
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

/// Entry point of `repro prop ARGS...`, once parsed.
pub fn main(args: PropArgs) -> ExitCode {
    match real_main(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("repro prop: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<PropArgs, clap::Error> {
        let argv = ["repro", "prop"].into_iter().chain(args.iter().copied());
        match crate::Cli::try_parse_from(argv)?.cmd {
            Some(crate::Sub::Prop(p)) => Ok(p),
            None => panic!("`repro prop {args:?}` did not parse as prop"),
        }
    }

    #[test]
    fn defaults() {
        let o = parse(&[]).unwrap();
        assert_eq!((o.seeds, o.start, o.chunk, o.timeout), (2000, 0, 500, 300));
        assert_eq!(o.arm, "ours");
        let l = &o.libs;
        assert_eq!((&l.stock_dir, &l.ours_dir, &l.hrx), (&None, &None, &None));
    }

    /// The test suite's step (`ab repro prop --seeds 2000`, crates/ab/src/test_steps.rs).
    #[test]
    fn the_test_suite_command_line() {
        assert_eq!(parse(&["--seeds", "2000"]).unwrap().seeds, 2000);
    }

    #[test]
    fn every_flag() {
        let o = parse(&[
            "--seeds",
            "20",
            "--start",
            "7",
            "--arm",
            "stock",
            "--chunk",
            "3",
            "--stock-dir",
            "/s",
            "--ours-dir",
            "/o",
            "--hrx",
            "/h.so",
            "--timeout",
            "60",
        ])
        .unwrap();
        assert_eq!((o.seeds, o.start, o.chunk, o.timeout), (20, 7, 3, 60));
        assert_eq!(o.arm, "stock");
        assert_eq!(o.libs.stock_dir.as_deref(), Some(Path::new("/s")));
        assert_eq!(o.libs.ours_dir.as_deref(), Some(Path::new("/o")));
        assert_eq!(o.libs.hrx.as_deref(), Some(Path::new("/h.so")));
    }

    #[test]
    fn bad_values_are_usage_errors() {
        let e = parse(&["--arm", "patched"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
        assert!(
            e.to_string().contains("[possible values: ours, stock]"),
            "{e}"
        );
        assert_eq!(e.exit_code(), 2);
        // A chunk of 0 seeds would never advance.
        let e = parse(&["--chunk", "0"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        assert!(e.to_string().contains("--chunk"), "{e}");
        let e = parse(&["--seeds", "2k"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        // No seed at all would pass vacuously: "0 passed, 0 failed", exit 0.
        let e = parse(&["--seeds", "0"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        assert!(e.to_string().contains("--seeds"), "{e}");
    }

    /// A range past u64::MAX is refused, not cut short (3 seeds asked, 1 run, "1 passed").
    #[test]
    fn a_seed_range_past_the_last_seed_is_refused() {
        assert_eq!(seed_end(7, 20).unwrap(), 27);
        assert_eq!(seed_end(u64::MAX - 3, 3).unwrap(), u64::MAX);
        let e = seed_end(u64::MAX - 1, 3).unwrap_err();
        assert!(
            e.to_string()
                .contains("--start 18446744073709551614 --seeds 3"),
            "{e}"
        );
    }
}
