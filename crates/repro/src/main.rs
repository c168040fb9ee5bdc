//! `repro`: the FILL + SET_ROWS in-place reproducer (issue 5, items 4, 5 and 8), run in three
//! arms.
//!
//! ```text
//! cargo run --release -p repro -- [--dev HRX0|CPU]... [--arms stock,patched,ours]
//!     [--stock-dir DIR] [--ours-dir DIR] [--hrx FILE] [--patches DIR] [--no-probe] [--no-stop] [--timeout SECS]
//! ```
//!
//! Each arm is one `libggml-base.so.0` swapped into the same stock `libggml.so.0` /
//! `libggml-cpu.so.0` through `LD_LIBRARY_PATH`:
//! - `stock`: the stock build's library (`target/llama-stock/bin`), the negative control;
//! - `patched`: the pinned `ggml/` with `patches/*.patch` applied, built by this tool
//!   (`target/patched/<sha16>/build/lib`, cached by the patch set's sha256);
//! - `ours`: the Rust library (`target/ours/lib`).
//!
//! For each device (default `HRX0` then `CPU`) and arm, the C program
//! `cabi-tests/inplace-repro/inplace_repro.c` (compiled here into `target/repro/`) runs in a
//! child process: the 32 reproducer cases, then on a device other than the CPU also the
//! placement-only pass (the price: splits and nodes off the device for all 32 cases, which
//! the stock arm cannot reach by computing), the chain cases (a second in-place writer of the
//! same storage; reported, not gating) and the two stop variants (`stop`: the scheduler
//! places the writer of pre-allocated device storage; `stop-assigned`: the writer is first
//! assigned to the CPU). Every run is named by
//! the sha256 of the `libggml-base` the child really mapped (from the `ab-probe` when
//! `target/release/libab_probe.so` exists, else from the `/proc/self/maps` line the program
//! prints), which must equal the arm's file.
//!
//! Writes `target/repro/report.json` and prints tables. Exit status 0 only when: `patched`
//! and `ours` pass 32/32 on each non-CPU device; `stock` does NOT pass there (the control
//! bites); every arm passes 32/32 on the CPU; `ours` stops (no memory fault, compute never
//! reached) with one stderr line naming the writer, `SET_ROWS`, the buffer type and every
//! scheduler backend, in both stop variants; and every run mapped its arm's library. Status 1 when a check fails, 2 when the
//! tool itself cannot run.

mod child;
mod parse;
mod patched;
mod prop;

use anyhow::{bail, Context, Result};
use child::{End, Finished};
use clap::{Args, Parser, Subcommand};
use serde_json::{json, Value};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

/// Number of reproducer cases the C program runs.
const N_CASES: u32 = 32;

/// The arms this tool knows, in their default order.
const ARMS: [&str; 3] = ["stock", "patched", "ours"];

/// The command line: the reproducer's options, or the `prop` subcommand.
#[derive(Parser, Debug)]
#[command(
    name = "repro",
    about = "The FILL + SET_ROWS in-place reproducer, run in three arms (stock, patched, ours)",
    after_help = "Exit status: 0 when every check passed, 1 when a check failed, 2 when the tool \
                  itself cannot run (a usage error included).",
    // `repro --dev CPU prop` is a mistake, not a prop run with ignored options.
    args_conflicts_with_subcommands = true,
    // The hand-written parser this replaces let a repeated flag's last value win.
    args_override_self = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Sub>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// The numeric property test of the in-place storage rule over random graphs.
    Prop(prop::PropArgs),
}

/// The reproducer's options.
#[derive(Args, Debug)]
struct RunArgs {
    /// A device to run on; repeat for several (HRX0, CPU).
    #[arg(long, value_name = "DEV", default_values = ["HRX0", "CPU"], value_parser = parse_dev)]
    dev: Vec<String>,
    /// The arms, comma-separated, in the order they run.
    #[arg(long, value_name = "ARMS", default_value = "stock,patched,ours", value_parser = parse_arms)]
    arms: ArmList,
    /// The workspace root (default: this crate's ../..).
    #[arg(long, value_name = "DIR", value_parser = bundle::caller_path_parser())]
    root: Option<PathBuf>,
    #[command(flatten)]
    libs: LibDirs,
    /// The patch set of the patched arm (default: patches/).
    #[arg(long, value_name = "DIR", value_parser = bundle::caller_path_parser())]
    patches: Option<PathBuf>,
    /// Do not preload the ab-probe; read the mapped library from /proc/self/maps.
    #[arg(long)]
    no_probe: bool,
    /// Skip the two stop variants.
    #[arg(long)]
    no_stop: bool,
    /// Limit per child process, in seconds (at least 1: 0 would time every run out).
    #[arg(long, value_name = "SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
}

/// Where the arms' libraries are, for the reproducer and `prop` alike.
#[derive(Args, Debug, Default)]
pub struct LibDirs {
    /// The stock libraries' folder (default: target/llama-stock/bin).
    #[arg(long, value_name = "DIR", value_parser = bundle::caller_path_parser())]
    pub stock_dir: Option<PathBuf>,
    /// The folder of our libggml-base.so.0 (default: target/ours/lib).
    #[arg(long, value_name = "DIR", value_parser = bundle::caller_path_parser())]
    pub ours_dir: Option<PathBuf>,
    /// The HRX backend library (default: target/release/libggml_hrx.so).
    #[arg(long, value_name = "FILE", value_parser = bundle::caller_path_parser())]
    pub hrx: Option<PathBuf>,
}

/// `--arms`: a comma-separated list of [`ARMS`] (empty names skipped).
#[derive(Debug, Clone, PartialEq, Eq)]
struct ArmList(Vec<String>);

fn parse_arms(s: &str) -> Result<ArmList, String> {
    let arms: Vec<String> = s
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if arms.is_empty() {
        return Err("no arm named (stock, patched, ours)".into());
    }
    match arms.iter().find(|a| !ARMS.contains(&a.as_str())) {
        Some(a) => Err(format!("unknown arm {a} (stock, patched, ours)")),
        None => Ok(ArmList(arms)),
    }
}

/// `--dev`: a device name, which ggml looks up ignoring case; the CPU in any case is `CPU`,
/// the name this tool tells the CPU by (a device gets the HRX backend, the chain, the stop
/// variants and the rule's switch; the CPU does not).
fn parse_dev(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty device name".into());
    }
    Ok(if s.eq_ignore_ascii_case("CPU") {
        "CPU".into()
    } else {
        s.into()
    })
}

/// The reproducer's resolved options.
struct Opts {
    root: PathBuf,
    devs: Vec<String>,
    arms: Vec<String>,
    stock_dir: Option<PathBuf>,
    ours_dir: Option<PathBuf>,
    hrx: Option<PathBuf>,
    patches: Option<PathBuf>,
    probe: bool,
    stop: bool,
    timeout: Duration,
}

impl RunArgs {
    /// Resolves the workspace root (which must exist) and the timeout.
    fn into_opts(self) -> Result<Opts> {
        let root = self
            .root
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
        let root = root
            .canonicalize()
            .with_context(|| format!("workspace root {}", root.display()))?;
        Ok(Opts {
            root,
            devs: self.dev,
            arms: self.arms.0,
            stock_dir: self.libs.stock_dir,
            ours_dir: self.libs.ours_dir,
            hrx: self.libs.hrx,
            patches: self.patches,
            probe: !self.no_probe,
            stop: !self.no_stop,
            timeout: Duration::from_secs(self.timeout),
        })
    }
}

/// One arm: a directory whose `libggml-base.so.0` goes first on `LD_LIBRARY_PATH`.
struct Arm {
    name: String,
    lib_dir: PathBuf,
    /// Hex sha256 of the arm's `libggml-base.so.0` (after symlinks).
    sha256: String,
    /// Canonical path of that file.
    real: PathBuf,
    extra: Value,
}

fn arm_from_dir(name: &str, lib_dir: &Path, extra: Value) -> Result<Arm> {
    let lib = lib_dir.join("libggml-base.so.0");
    let real = lib
        .canonicalize()
        .with_context(|| format!("arm {name}: no {}", lib.display()))?;
    let sha256 = pins::sha256_file(&real)?;
    Ok(Arm {
        name: name.to_owned(),
        lib_dir: lib_dir.to_owned(),
        sha256,
        real,
        extra,
    })
}

/// Compiles `cabi-tests/inplace-repro/<source>` (the reproducer, or the property test) with
/// the project's C flags against the pinned headers and the stock libraries, into `out`.
pub(crate) fn build_program(
    root: &Path,
    source: &str,
    upstream: &Path,
    stock_bin: &Path,
    out: &Path,
) -> Result<()> {
    let src = root.join("cabi-tests/inplace-repro").join(source);
    let mut cmd = Command::new("cc");
    cmd.args([
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Wpedantic",
        "-Werror",
        "-O1",
        "-g",
    ])
    .arg(format!("-I{}", upstream.join("ggml/include").display()))
    .arg(&src)
    .arg("-o")
    .arg(out)
    .arg(format!("-L{}", stock_bin.display()))
    .args([
        "-l:libggml-base.so.0",
        "-l:libggml.so.0",
        "-l:libggml-cpu.so.0",
        "-lm",
    ]);
    eprintln!("[repro] compile {source}: {cmd:?}");
    let st = cmd.status().context("starting cc")?;
    if !st.success() {
        bail!("compiling {} failed ({st})", src.display());
    }
    Ok(())
}

/// The settings shared by every child run.
struct Ctx {
    program: PathBuf,
    stock_bin: PathBuf,
    hrx: Option<PathBuf>,
    probe: Option<PathBuf>,
    logs: PathBuf,
    timeout: Duration,
}

/// One child run of the program in one arm, with the library it mapped.
struct Run {
    fin: Finished,
    out: parse::Output,
    mapped_path: Option<String>,
    mapped_sha256: Option<String>,
    mapped_from: &'static str,
}

impl Run {
    fn mapped_ok(&self, arm: &Arm) -> bool {
        self.mapped_sha256.as_deref() == Some(arm.sha256.as_str())
    }
}

fn probe_base(path: &Path, pid: u32) -> Option<(String, String)> {
    let text = fs::read_to_string(path).ok()?;
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["pid"].as_u64() == Some(u64::from(pid)))
        .find(|v| v["name"].as_str() == Some("libggml-base"))
        .and_then(|v| {
            Some((
                v["path"].as_str()?.to_owned(),
                v["sha256"].as_str()?.to_owned(),
            ))
        })
}

fn run_arm(ctx: &Ctx, arm: &Arm, dev: &str, mode: &str) -> Result<Run> {
    run_arm_with(ctx, arm, dev, mode, None)
}

/// [`run_arm`] with `GGML_SCHED_INPLACE_RULE` set to `rule` (unset when `None`; the log
/// files then carry the value in their names).
fn run_arm_with(ctx: &Ctx, arm: &Arm, dev: &str, mode: &str, rule: Option<&str>) -> Result<Run> {
    let tag = rule.map_or(String::new(), |v| format!("-rule={}", log_safe(v)));
    let stem = ctx.logs.join(format!("{}-{}-{}{tag}", arm.name, dev, mode));
    let mut cmd = Command::new(&ctx.program);
    match rule {
        Some(v) => cmd.env("GGML_SCHED_INPLACE_RULE", v),
        None => cmd.env_remove("GGML_SCHED_INPLACE_RULE"),
    };
    cmd.args(["--dev", dev, "--mode", mode]);
    let ld = if arm.lib_dir == ctx.stock_bin {
        ctx.stock_bin.display().to_string()
    } else {
        format!("{}:{}", arm.lib_dir.display(), ctx.stock_bin.display())
    };
    cmd.env("LD_LIBRARY_PATH", ld)
        .env("GGML_NO_BACKTRACE", "1")
        .env_remove("GGML_BACKEND_PATH")
        .env_remove("LD_PRELOAD");
    if dev != "CPU" {
        if let Some(h) = &ctx.hrx {
            cmd.env("GGML_BACKEND_PATH", h)
                .env("GGML_HRX_EAGER_OPS", "+FILL,-SET_ROWS");
        }
    }
    let probe_out = stem.with_extension("probe.jsonl");
    if let Some(p) = &ctx.probe {
        let _ = fs::remove_file(&probe_out);
        cmd.env("LD_PRELOAD", p)
            .env("GGML_AB_PROBE_OUT", &probe_out);
    }
    let fin = child::run_logged(cmd, &stem, ctx.timeout)?;
    let out = parse::parse(&fin.stdout);
    let (mapped_path, mapped_sha256, mapped_from) = match ctx
        .probe
        .as_ref()
        .and_then(|_| probe_base(&probe_out, fin.pid))
    {
        Some((p, s)) => (Some(p), Some(s), "ab-probe"),
        None => {
            let p = out.mapped_base.clone().filter(|p| p != "unknown");
            let s = p
                .as_ref()
                .and_then(|p| pins::sha256_file(Path::new(p)).ok());
            (p, s, "/proc/self/maps")
        }
    };
    Ok(Run {
        fin,
        out,
        mapped_path,
        mapped_sha256,
        mapped_from,
    })
}

/// A switch value as a file-name part: `empty` for "", other characters than letters and
/// digits as `_`.
fn log_safe(v: &str) -> String {
    if v.is_empty() {
        return "empty".into();
    }
    v.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Values of `GGML_SCHED_INPLACE_RULE` and whether each must leave the rule on. Only the
/// documented "off" spellings may switch a safety rule off; a typo, the empty string or
/// garbage keeps it on (with a warning). `off` is in the list so that the check can fail:
/// with the rule off, ours places as stock does and dies as stock does.
const RULE_SPELLINGS: &[(&str, bool)] = &[
    ("1", true),
    ("on", true),
    ("yes", true),
    ("", true),
    ("enable", true),
    ("of", true),
    ("off", false),
];

/// Runs the reproducer in `arm` on `dev` once per [`RULE_SPELLINGS`] value; returns the
/// table lines and pushes a failure for each value that did not behave as listed.
fn rule_spellings(
    ctx: &Ctx,
    arm: &Arm,
    dev: &str,
    failures: &mut Vec<String>,
) -> Result<(Vec<String>, Value)> {
    let mut lines = Vec::new();
    let mut runs = Vec::new();
    for &(value, rule_on) in RULE_SPELLINGS {
        let r = run_arm_with(ctx, arm, dev, "repro", Some(value))?;
        let warned = r.fin.stderr.contains(&format!(
            "GGML_SCHED_INPLACE_RULE='{value}' is not a switch"
        ));
        let expect_warning = !matches!(value, "1" | "on" | "yes" | "off");
        let ok = if rule_on {
            passed_all(&r) && warned == expect_warning
        } else {
            !passed_all(&r) && !warned
        };
        if !ok {
            failures.push(format!(
                "{} on {dev} with GGML_SCHED_INPLACE_RULE='{value}': {}, warning {}; expected {}",
                arm.name,
                repro_result(&r),
                if warned { "given" } else { "not given" },
                if rule_on {
                    format!(
                        "the rule on ({N_CASES}/{N_CASES}){}",
                        if expect_warning {
                            " and a warning naming the value"
                        } else {
                            ""
                        }
                    )
                } else {
                    "the rule off (the reproducer fails as stock's does)".to_string()
                }
            ));
        }
        // The result, then what was expected of it and whether it held: a row must not read
        // as "rule on" when the run ended before the rule could show.
        lines.push(format!(
            "{:<8} {dev:<5} GGML_SCHED_INPLACE_RULE={:<9} {:<40} expected rule {}: {}",
            arm.name,
            format!("'{value}'"),
            format!(
                "{}{}",
                repro_result(&r),
                if warned { ", warned by name" } else { "" }
            ),
            if rule_on { "on" } else { "off" },
            if ok { "as expected" } else { "NOT as expected" }
        ));
        runs.push(json!({
            "value": value,
            "rule_expected_on": rule_on,
            "result": repro_result(&r),
            "passed_all": passed_all(&r),
            "warned": warned,
            "ok": ok,
        }));
    }
    Ok((lines, Value::Array(runs)))
}

fn passed_all(r: &Run) -> bool {
    r.fin.end == End::Exit(0) && r.out.summary == Some((N_CASES, 0))
}

fn repro_result(r: &Run) -> String {
    match (&r.fin.end, r.out.summary) {
        (End::Exit(_), Some((p, _))) => format!("{p}/{N_CASES}"),
        (end, _) => format!(
            "{} after {} ok/{}{}",
            end.describe(),
            r.out.ok.len(),
            N_CASES,
            // The reproducer prints its own errors on stdout; a crash leaves its trace on
            // stderr, among the libraries' log lines.
            match end {
                End::Exit(_) => why_it_stopped(&r.fin.stdout),
                _ => why_it_crashed(&r.fin.stderr),
            }
        ),
    }
}

/// For a run that stopped before its summary (a device that does not exist, a crash): the
/// last line of `output`, shortened, after `: `; else nothing. A table that said only "exit 2
/// after 0 ok" hid the reason, which the reproducer had printed.
fn why_it_stopped(stderr: &str) -> String {
    const MOST: usize = 160;
    let Some(line) = stderr.lines().map(str::trim).rfind(|l| !l.is_empty()) else {
        return String::new();
    };
    if line.chars().count() <= MOST {
        return format!(": {line}");
    }
    let cut: String = line.chars().take(MOST).collect();
    format!(": {cut}...")
}

/// For a run killed by a signal: the last line of `stderr` that says what went wrong (an
/// assertion, an abort, an error, a panic), shortened, after `: `; else nothing. A SIGSEGV
/// prints no such line, and the last line on stderr was then whatever a library logged
/// before it ("load_backend: loaded HRX backend from ..."), which the table showed as if it
/// were the cause.
fn why_it_crashed(stderr: &str) -> String {
    // "what():" is the message of an uncaught C++ exception (after "terminate called after
    // throwing an instance of ...").
    const WORDS: [&str; 8] = [
        "error",
        "assert",
        "abort",
        "panick",
        "fail",
        "fatal",
        "what():",
        "terminate called",
    ];
    let says_why = |l: &&str| {
        let l = l.to_ascii_lowercase();
        WORDS.iter().any(|w| l.contains(w))
    };
    match stderr.lines().map(str::trim).rfind(says_why) {
        Some(line) => why_it_stopped(line),
        None => String::new(),
    }
}

fn run_json(r: &Run, arm: &Arm) -> Value {
    json!({
        "end": r.fin.end.describe(),
        "pid": r.fin.pid,
        "seconds": r.fin.seconds,
        "mapped_libggml_base": r.mapped_path,
        "mapped_sha256": r.mapped_sha256,
        "mapped_from": r.mapped_from,
        "mapped_is_arm": r.mapped_ok(arm),
        "sched_backends": r.out.sched_backends,
        "logs": [r.fin.logs.0.display().to_string(), r.fin.logs.1.display().to_string()],
    })
}

/// Sum and maximum of splits, and off-device / total compute nodes over the placement lines.
fn price(r: &Run) -> Value {
    let p = &r.out.placements;
    let splits: u32 = p.iter().map(|x| x.splits).sum();
    let max_splits = p.iter().map(|x| x.splits).max().unwrap_or(0);
    let off: u32 = p.iter().map(|x| x.off_device).sum();
    let nodes: u32 = p.iter().map(|x| x.nodes).sum();
    let fill_on: std::collections::BTreeSet<&str> = p.iter().map(|x| x.fill.as_str()).collect();
    let set_on: std::collections::BTreeSet<&str> = p.iter().map(|x| x.set_rows.as_str()).collect();
    let out_on: std::collections::BTreeSet<&str> = p.iter().map(|x| x.out.as_str()).collect();
    json!({
        "cases": p.len(),
        "splits_total": splits,
        "splits_max": max_splits,
        "nodes_total": nodes,
        "nodes_off_device": off,
        "fill_on": fill_on,
        "set_rows_on": set_on,
        "consumer_on": out_on,
    })
}

/// Judges a stop run: it must end without a memory fault, never finish the compute, and
/// print one line naming the writer, its op, the buffer type and every scheduler backend.
fn stop_verdict(r: &Run) -> (bool, Value) {
    let buft = r
        .out
        .stop_lines
        .iter()
        .find_map(|l| {
            let rest = l.split_once(" in buffer type ")?.1;
            Some(rest.split_whitespace().next()?.to_owned())
        })
        .unwrap_or_default();
    let mut words = vec!["store_write".to_owned(), "SET_ROWS".to_owned()];
    if !buft.is_empty() {
        words.push(buft.clone());
    }
    words.extend(r.out.sched_backends.iter().cloned());
    let mut seen = std::collections::HashSet::new();
    words.retain(|w| seen.insert(w.clone()));
    // The message goes to stderr (GGML_ABORT, or ggml's default log callback). Candidate lines
    // name the writer; the message is the first one that names everything.
    let candidates: Vec<&str> = r
        .fin
        .stderr
        .lines()
        .filter(|l| l.contains("store_write"))
        .collect();
    let message = candidates
        .iter()
        .find(|l| words.iter().all(|w| l.contains(w.as_str())))
        .map(|l| (*l).to_owned());
    let missing: Vec<&String> = words
        .iter()
        .filter(|w| !candidates.iter().any(|l| l.contains(w.as_str())))
        .collect();
    let completed = r
        .out
        .stop_lines
        .iter()
        .any(|l| l.contains("compute returned"));
    let fault =
        matches!(&r.fin.end, End::Signal(s, _) if *s == libc::SIGSEGV || *s == libc::SIGBUS);
    let stopped = !completed && !fault && r.fin.end != End::Exit(0) && r.fin.end != End::Timeout;
    let last_err: Vec<&str> = r.fin.stderr.lines().rev().take(4).collect();
    let ok = stopped && message.is_some() && !buft.is_empty();
    (
        ok,
        json!({
            "end": r.fin.end.describe(),
            "stopped": stopped,
            "named": message.is_some(),
            "message": message,
            "words": words,
            "words_missing": missing,
            "candidate_lines": candidates,
            "writer_scheduled": r.out.stop_lines.iter().find(|l| l.contains("scheduled writer")),
            "stderr_tail": last_err.into_iter().rev().collect::<Vec<_>>(),
        }),
    )
}

fn short(s: &str) -> &str {
    &s[..s.len().min(12)]
}

fn real_main(o: Opts) -> Result<bool> {
    let target = o.root.join("target");
    let out_dir = target.join("repro");
    let logs = out_dir.join("logs");
    fs::create_dir_all(&logs)?;
    // Held to the end: two reproducers in one workspace would write one report.json.
    let _lock = bundle::lock_dir(&out_dir).map_err(anyhow::Error::msg)?;

    let pins = pins::Pins::load(&o.root)?;
    let upstream = pins.ensure_upstream(&target)?;
    let stock_build = target.join("llama-stock");
    let stock_bin = o
        .stock_dir
        .clone()
        .unwrap_or_else(|| stock_build.join("bin"));
    for f in ["libggml-base.so.0", "libggml.so.0", "libggml-cpu.so.0"] {
        if !stock_bin.join(f).exists() {
            bail!("the stock build has no {}", stock_bin.join(f).display());
        }
    }
    let program = out_dir.join("inplace_repro");
    build_program(&o.root, "inplace_repro.c", &upstream, &stock_bin, &program)?;

    let hrx = o
        .hrx
        .clone()
        .unwrap_or_else(|| target.join("release/libggml_hrx.so"));
    let hrx = hrx.exists().then_some(hrx);
    let probe = target.join("release/libab_probe.so");
    let probe = (o.probe && probe.exists()).then_some(probe);
    let ctx = Ctx {
        program,
        stock_bin: stock_bin.clone(),
        hrx: hrx.clone(),
        probe: probe.clone(),
        logs,
        timeout: o.timeout,
    };

    let mut failures: Vec<String> = Vec::new();
    let mut arms: Vec<Arm> = Vec::new();
    let mut arm_errors = serde_json::Map::new();
    for name in &o.arms {
        let made = match name.as_str() {
            "stock" => arm_from_dir("stock", &stock_bin, json!({})),
            "patched" => patched::ensure_patched(
                &target,
                &o.patches.clone().unwrap_or_else(|| o.root.join("patches")),
                &upstream,
                &stock_build,
            )
            .and_then(|p| {
                let extra = json!({
                    "patch_set_sha256": p.patch_sha256,
                    "patches": p.patches.iter().map(|x| x.display().to_string()).collect::<Vec<_>>(),
                    "cached": p.cached,
                    "defines_missing_vs_stock": p.define_diff.0,
                    "defines_extra_vs_stock": p.define_diff.1,
                });
                if !p.define_diff.0.is_empty() || !p.define_diff.1.is_empty() {
                    eprintln!(
                        "[repro] warning: patched ggml-backend.cpp defines differ from stock: missing {:?}, extra {:?}",
                        p.define_diff.0, p.define_diff.1
                    );
                }
                arm_from_dir("patched", &p.lib_dir, extra)
            }),
            _ => arm_from_dir(
                "ours",
                &o.ours_dir
                    .clone()
                    .unwrap_or_else(|| target.join("ours/lib")),
                json!({}),
            ),
        };
        match made {
            Ok(a) => arms.push(a),
            Err(e) => {
                failures.push(format!("arm {name} unavailable: {e:#}"));
                arm_errors.insert(name.clone(), json!(format!("{e:#}")));
            }
        }
    }

    let mut results = Vec::new();
    let mut table = Vec::new();
    for dev in &o.devs {
        let is_cpu = dev == "CPU";
        if !is_cpu && hrx.is_none() && dev.starts_with("HRX") {
            failures.push(format!(
                "{dev}: no HRX library (target/release/libggml_hrx.so or --hrx)"
            ));
            continue;
        }
        for arm in &arms {
            let r = run_arm(&ctx, arm, dev, "repro")?;
            let mut entry = json!({
                "arm": arm.name,
                "dev": dev,
                "arm_lib": arm.real.display().to_string(),
                "arm_sha256": arm.sha256,
                "arm_info": arm.extra,
                "repro": run_json(&r, arm),
                "cases_ok": r.out.ok,
                "mismatches": r.out.mismatches.iter().map(|(c, t)| json!({"case": c, "line": t})).collect::<Vec<_>>(),
                "summary": r.out.summary.map(|(p, f)| json!({"passed": p, "failed": f})),
                "result": repro_result(&r),
            });
            if !r.mapped_ok(arm) {
                failures.push(format!(
                    "{} on {dev}: mapped {:?} (sha256 {:?}), not the arm's {}",
                    arm.name,
                    r.mapped_path,
                    r.mapped_sha256,
                    arm.real.display()
                ));
            }
            let pass = passed_all(&r);
            match (arm.name.as_str(), is_cpu) {
                (_, true) if !pass => failures.push(format!(
                    "{} on CPU: {} (every arm must pass on the CPU)",
                    arm.name,
                    repro_result(&r)
                )),
                ("stock", false) if pass => failures.push(format!(
                    "stock on {dev} passed {}: the negative control did not bite",
                    repro_result(&r)
                )),
                ("patched" | "ours", false) if !pass => failures.push(format!(
                    "{} on {dev}: {}, expected {N_CASES}/{N_CASES}",
                    arm.name,
                    repro_result(&r)
                )),
                _ => {}
            }
            let mut price_v = price(&r);
            let mut stops = Vec::new();
            let mut chain_result = String::new();
            if !is_cpu {
                let c = run_arm(&ctx, arm, dev, "chain")?;
                chain_result = repro_result(&c);
                entry["chain"] = json!({
                    "result": repro_result(&c),
                    "passed_all": passed_all(&c),
                    "run": run_json(&c, arm),
                    "price": price(&c),
                    "mismatches": c.out.mismatches.iter().map(|(n, t)| json!({"case": n, "line": t})).collect::<Vec<_>>(),
                });
                let p = run_arm(&ctx, arm, dev, "place")?;
                price_v = price(&p);
                // The control only means something when stock sets the defect up: FILL on
                // the device, SET_ROWS on the CPU, in every case.
                if arm.name == "stock"
                    && (p.out.placements.len() != N_CASES as usize
                        || p.out
                            .placements
                            .iter()
                            .any(|x| !x.fill.eq_ignore_ascii_case(dev) || x.set_rows != "CPU"))
                {
                    failures.push(format!(
                        "stock on {dev}: FILL not on {dev} or SET_ROWS not on the CPU in every case ({} placed): the reproducer does not set up the defect",
                        p.out.placements.len()
                    ));
                }
                entry["place"] = run_json(&p, arm);
                if o.stop {
                    for mode in ["stop", "stop-assigned"] {
                        let s = run_arm(&ctx, arm, dev, mode)?;
                        let (ok, mut v) = stop_verdict(&s);
                        v["run"] = run_json(&s, arm);
                        v["named_stop_ok"] = json!(ok);
                        if arm.name == "ours" && !ok {
                            failures.push(format!(
                                "ours on {dev} ({mode}): no named stop ({}; words missing from the message: {})",
                                s.fin.end.describe(),
                                v["words_missing"]
                            ));
                        }
                        stops.push(format!(
                            "{}{}",
                            s.fin.end.describe(),
                            if ok { " named" } else { "" }
                        ));
                        entry[if mode == "stop" {
                            "stop_natural"
                        } else {
                            "stop_assigned"
                        }] = v;
                    }
                }
            }
            entry["price"] = price_v.clone();
            table.push((
                arm.name.clone(),
                short(&arm.sha256).to_owned(),
                dev.clone(),
                repro_result(&r),
                format!("{}/{}", price_v["splits_total"], price_v["splits_max"]),
                format!("{}/{}", price_v["nodes_off_device"], price_v["nodes_total"]),
                price_v["fill_on"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str())
                            .collect::<Vec<_>>()
                            .join("+")
                    })
                    .unwrap_or_default(),
                chain_result,
                stops.join(" | "),
            ));
            results.push(entry);
        }
    }

    // The rule's switch: ours on the first device that is not the CPU.
    let mut spelling_lines = Vec::new();
    let mut spelling_runs = Value::Null;
    if let (Some(arm), Some(dev)) = (
        arms.iter().find(|a| a.name == "ours"),
        o.devs.iter().find(|d| d.as_str() != "CPU"),
    ) {
        let (lines, runs) = rule_spellings(&ctx, arm, dev, &mut failures)?;
        spelling_lines = lines;
        spelling_runs = runs;
    }

    let ok = failures.is_empty();
    let report = json!({
        "rule_switch_spellings": spelling_runs,
        "tool": "repro",
        "cases": N_CASES,
        "devices": o.devs,
        "hrx_library": hrx.as_ref().map(|h| h.display().to_string()),
        "hrx_sha256": hrx.as_ref().and_then(|h| pins::sha256_file(h).ok()),
        "hrx_env": {"GGML_HRX_EAGER_OPS": "+FILL,-SET_ROWS"},
        "probe": probe.as_ref().map(|p| p.display().to_string()),
        "stock_bin": stock_bin.display().to_string(),
        "arms_unavailable": arm_errors,
        "runs": results,
        "failures": failures,
        "ok": ok,
    });
    let report_path = out_dir.join("report.json");
    fs::write(&report_path, serde_json::to_string_pretty(&report)? + "\n")?;

    println!(
        "{:<8} {:<12} {:<5} {:<24} {:<12} {:<10} {:<9} {:<24} stop (natural | assigned)",
        "arm",
        "sha256",
        "dev",
        "reproducer",
        "splits Σ/max",
        "off-dev",
        "FILL on",
        "chain (2 writers)"
    );
    for (a, s, d, r, sp, off, fill, ch, st) in &table {
        println!("{a:<8} {s:<12} {d:<5} {r:<24} {sp:<12} {off:<10} {fill:<9} {ch:<24} {st}");
    }
    for l in &spelling_lines {
        println!("{l}");
    }
    for f in &failures {
        println!("FAIL: {f}");
    }
    println!(
        "{} (report: {})",
        if ok { "OK" } else { "FAILED" },
        report_path.display()
    );
    Ok(ok)
}

fn main() -> ExitCode {
    // First, while this is the only thread: the folder the user's relative paths are taken
    // from (bundle::caller_path), for the arguments parsed below.
    bundle::take_caller_dir();
    // clap exits with 2 on a usage error (0 for --help): the status of "cannot run".
    let cli = Cli::parse();
    if let Some(Sub::Prop(args)) = cli.cmd {
        return prop::main(args);
    }
    match cli.run.into_opts().and_then(real_main) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("repro: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_run_that_stopped_says_its_last_line() {
        assert_eq!(
            super::why_it_stopped("loading\ninplace_repro: no device HRX1\n\n"),
            ": inplace_repro: no device HRX1"
        );
        assert_eq!(super::why_it_stopped(" \n"), "");
        let long = "x".repeat(300);
        assert_eq!(
            super::why_it_stopped(&long),
            format!(": {}...", "x".repeat(160))
        );
    }

    #[test]
    fn a_crash_says_only_a_line_that_names_what_went_wrong() {
        // What stock's SIGSEGV on HRX0 left on stderr: a loader line, no reason.
        assert_eq!(
            super::why_it_crashed("load_backend: loaded HRX backend from /x/libggml_hrx.so\n"),
            ""
        );
        assert_eq!(
            super::why_it_crashed(
                "ggml.c:12: GGML_ASSERT(n > 0) failed\nload_backend: loaded CPU backend\n"
            ),
            ": ggml.c:12: GGML_ASSERT(n > 0) failed"
        );
        assert_eq!(super::why_it_crashed(""), "");
        assert_eq!(
            super::why_it_crashed(
                "terminate called after throwing an instance of 'std::out_of_range'\n  what():  vector::_M_range_check\n"
            ),
            ": what():  vector::_M_range_check"
        );
    }

    use super::*;
    use clap::error::ErrorKind;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("repro").chain(args.iter().copied()))
    }

    fn run_args(args: &[&str]) -> RunArgs {
        let cli = parse(args).unwrap();
        assert!(cli.cmd.is_none(), "{args:?} parsed as a subcommand");
        cli.run
    }

    /// `ab repro` (the main job and the test suite) passes no argument.
    #[test]
    fn defaults_are_both_devices_and_three_arms() {
        let o = run_args(&[]).into_opts().unwrap();
        assert_eq!(o.devs, ["HRX0", "CPU"]);
        assert_eq!(o.arms, ["stock", "patched", "ours"]);
        assert!(o.probe && o.stop);
        assert_eq!(o.timeout, Duration::from_secs(300));
        assert!(o.root.join("crates/repro/Cargo.toml").is_file());
    }

    /// The command lines of docs/inplace-rule.md and cabi-tests/inplace-repro/README.md.
    #[test]
    fn documented_command_lines() {
        let o = run_args(&["--dev", "CPU", "--arms", "stock,patched"]);
        assert_eq!(o.dev, ["CPU"]);
        assert_eq!(o.arms, ArmList(vec!["stock".into(), "patched".into()]));
        let o = run_args(&[
            "--dev",
            "HRX0",
            "--dev",
            "CPU",
            "--stock-dir",
            "/s",
            "--ours-dir",
            "/o",
            "--hrx",
            "/h.so",
            "--patches",
            "/p",
            "--no-probe",
            "--no-stop",
            "--timeout",
            "9",
        ]);
        assert_eq!(o.dev, ["HRX0", "CPU"]);
        assert_eq!(o.libs.stock_dir.as_deref(), Some(Path::new("/s")));
        assert_eq!(o.libs.ours_dir.as_deref(), Some(Path::new("/o")));
        assert_eq!(o.libs.hrx.as_deref(), Some(Path::new("/h.so")));
        assert_eq!(o.patches.as_deref(), Some(Path::new("/p")));
        assert!(o.no_probe && o.no_stop);
        assert_eq!(o.timeout, 9);
    }

    #[test]
    fn empty_arm_names_are_skipped() {
        assert_eq!(
            parse_arms("ours,,stock,"),
            Ok(ArmList(vec!["ours".into(), "stock".into()]))
        );
    }

    /// A zero limit would time every child out: refused, in both subcommands.
    #[test]
    fn a_zero_timeout_is_refused() {
        let e = parse(&["--timeout", "0"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        let e = Cli::try_parse_from(["repro", "prop", "--timeout", "0"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        assert!(parse(&["--timeout", "1"]).is_ok());
    }

    /// No arm at all would run nothing and report OK: a usage error instead.
    #[test]
    fn an_empty_arm_list_is_refused() {
        for v in ["", ",", ",,"] {
            let e = parse(&["--arms", v]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ValueValidation, "{v:?}");
            assert!(e.to_string().contains("no arm named"), "{e}");
            assert_eq!(e.exit_code(), 2);
        }
    }

    /// ggml finds `cpu` as the CPU; so must this tool, or it runs the device checks (the
    /// rule's switch among them, which then fails) on the CPU.
    #[test]
    fn the_cpu_in_any_case_is_the_cpu() {
        assert_eq!(
            run_args(&["--dev", "cpu", "--dev", "Hrx0"]).dev,
            ["CPU", "Hrx0"]
        );
        assert_eq!(
            parse(&["--dev", " "]).unwrap_err().kind(),
            ErrorKind::ValueValidation
        );
    }

    #[test]
    fn a_missing_root_cannot_run() {
        let e = run_args(&["--root", "/no/such/root"])
            .into_opts()
            .err()
            .unwrap();
        assert!(
            format!("{e:#}").starts_with("workspace root /no/such/root"),
            "{e:#}"
        );
    }

    #[test]
    fn bad_values_are_usage_errors() {
        let e = parse(&["--arms", "stock,fixed"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        assert!(
            e.to_string()
                .contains("unknown arm fixed (stock, patched, ours)"),
            "{e}"
        );
        // 2: the status of "the tool cannot run", as documented.
        assert_eq!(e.exit_code(), 2);
        let e = parse(&["--timeout", "5m"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        assert!(e.to_string().contains("'5m' for '--timeout <SECS>'"), "{e}");
        assert_eq!(
            parse(&["--bogus"]).unwrap_err().kind(),
            ErrorKind::UnknownArgument
        );
        // The reproducer's options do not go with the subcommand.
        assert_eq!(
            parse(&["--dev", "CPU", "prop"]).unwrap_err().kind(),
            ErrorKind::ArgumentConflict
        );
    }
}
