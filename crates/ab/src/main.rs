//! `ab`, the A/B harness: fetch the pins, build the stock llama.cpp and ours, run stock
//! programs with a chosen `libggml-base` swapped in (with the proof, from inside each
//! process, of which files it mapped), the main comparison job, and the test runner.
//!
//! Normally started through the `./ab` script at the workspace root (which installs the
//! system packages it needs first). Adding a subcommand: add a variant to [`Cmd`] and a
//! match arm in [`dispatch`]; to make it part of `./ab test`, add one line to
//! `test_steps.rs`.

mod abi;
mod build_origin;
mod cxxrt;
mod job;
mod machine;
mod ours;
mod pack;
mod parse;
mod paths;
mod pipeline;
mod proc;
mod proof;
mod rpc;
mod selftest;
mod stock;
mod swap;
mod test_steps;
mod testrun;
mod trap;
mod views;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use paths::Paths;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "ab",
    about = "A/B harness: run an unchanged llama.cpp build with one libggml-base or another, \
             prove which library each process mapped, compare the results",
    after_help = "Without a subcommand, runs the main job (`ab ab`). The workspace's other \
                  tools run as `ab NAME ARGS`: `ab bench` (benchmarks, `ab bench gpu` on a GPU \
                  build), `ab view` (placement pages), `ab sched-diff` (the differential), \
                  `ab repro` (the in-place reproducer); each has its own --help."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Fetch and verify the pinned inputs (upstream sdist, model) with pip.
    Fetch,
    /// Configure and build the stock llama.cpp in target/llama-stock (reused when done).
    BuildStock {
        /// Wipe the build folder, whatever it holds, and build it again.
        #[arg(long)]
        force: bool,
        /// Build every target of the configured build (llama-server, the CLI, every example
        /// and tool), not only what the harness uses.
        #[arg(long)]
        all: bool,
    },
    /// Build our libggml-base (and libggml-hrx when the crate exists) into target/ours/lib.
    BuildOurs,
    /// Run one program of the llama.cpp build with the chosen libggml-base, and prove it.
    Exec(ExecArgs),
    /// The main job: the same work in two arms, report.json and a table.
    Ab(AbArgs),
    /// The test suite: builds, cargo tests, the RUNPATH trap and the further steps.
    Test,
    /// The RUNPATH trap test: a DT_RPATH program must be caught mapping the wrong file.
    RunpathTrap(BuildArg),
    /// Self-test of the swap: the stock file and a modified copy are each proven mapped.
    SwapCheck(BuildArg),
    /// ggml-rpc across arms: ggml-rpc-server in one arm on a loopback port, llama-completion
    /// splitting a model between RPC0 and its own device; texts compared (stock+stock,
    /// ours+ours, stock server + our client), every process proven.
    Rpc {
        /// A llama.cpp build folder (default: target/llama-stock).
        #[arg(long, value_name = "DIR", value_parser = bundle::caller_path_parser())]
        llama_build: Option<PathBuf>,
        /// The GGUF model (default: the pinned SmolLM2; required from a bundle).
        #[arg(long, value_name = "FILE", value_parser = bundle::caller_path_parser())]
        model: Option<PathBuf>,
        /// Layers on RPC0 when the build has no device besides the CPU.
        #[arg(long, value_name = "N", default_value_t = 8)]
        ngl: u32,
        /// Loopback port of the server.
        #[arg(long, default_value_t = 50752)]
        port: u16,
    },
    /// Pipeline parallelism checked by perplexity and greedy text: llama-perplexity over a
    /// fixed text with `-c 2048 -b 2048 -ub 512`, then llama-completion greedy, on one device
    /// and split over two (llama.cpp must say "pipeline parallelism enabled"), in the stock
    /// arm and ours, every process proven; each arm's two-device estimate within 0.1 % of its
    /// one-device one and its two-device text equal to its one-device text, and the arms
    /// likewise.
    Pipeline(pipeline::PipelineOptions),
    /// The libggml-base files the harness has kept (target/ab/store), by sha256: what
    /// --a, --b and --lib accept besides a path.
    Store,
    /// Write target/ab-bundle/ (and .tar.gz): the harness, our libraries and the probe, to
    /// run on a machine without cargo (`ab-bundle/ab ab --llama-build DIR --model FILE`).
    Bundle {
        /// The folder to write (default: target/ab-bundle).
        #[arg(long, value_name = "DIR", value_parser = bundle::caller_path_parser())]
        out: Option<PathBuf>,
    },
    /// Prints, as JSON, the ggml version, commit and struct sizes of one libggml-base file
    /// (what the harness runs in a child before it swaps a file into a build).
    #[command(hide = true)]
    AbiOf {
        #[arg(value_parser = bundle::caller_path_parser())]
        file: PathBuf,
    },
    /// Any other name runs a tool of the workspace: `ab NAME ARGS` builds the workspace
    /// binary `NAME` (or `ab-NAME`, or the package of that name) and runs it with ARGS.
    #[command(external_subcommand)]
    External(Vec<OsString>),
}

#[derive(Args, Debug)]
struct BuildArg {
    /// A llama.cpp build folder (default: target/llama-stock).
    #[arg(long, value_name = "DIR", value_parser = bundle::caller_path_parser())]
    llama_build: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct ExecArgs {
    /// The libggml-base to run with: a file, or a stored sha256 (prefix), as `ab ab --a`.
    #[arg(long, value_name = "FILE")]
    lib: PathBuf,
    /// A backend library for GGML_BACKEND_PATH.
    #[arg(long, value_name = "FILE", value_parser = bundle::caller_path_parser())]
    backend: Option<PathBuf>,
    /// The llama.cpp build folder whose programs are run (default: target/llama-stock).
    #[arg(long, value_name = "DIR", value_parser = bundle::caller_path_parser())]
    llama_build: Option<PathBuf>,
    /// Arm name (the swap folder is target/ab/arms/<ARM>/lib): letters, digits, '.', '_' and
    /// '-', not starting with '.'.
    #[arg(long, default_value = "exec")]
    arm: String,
    /// Program (name in the build's bin/, or a path) and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "PROGRAM ARGS")]
    command: Vec<String>,
}

#[derive(Args, Debug, Default)]
struct AbArgs {
    /// libggml-base of arm A: a file, or the sha256 (a unique prefix of 6+ digits) of one the
    /// harness has kept (`ab store`) (default: the llama build's own, arm `stock`).
    #[arg(long, value_name = "FILE")]
    a: Option<PathBuf>,
    /// libggml-base of arm B: a file or a stored sha256, as --a (default: ours from
    /// target/ours/lib, arm `ours`).
    #[arg(long, value_name = "FILE")]
    b: Option<PathBuf>,
    /// A backend library for GGML_BACKEND_PATH, in both arms.
    #[arg(long, value_name = "FILE", value_parser = bundle::caller_path_parser())]
    backend: Option<PathBuf>,
    /// An existing llama.cpp build folder instead of target/llama-stock.
    #[arg(long, value_name = "DIR", value_parser = bundle::caller_path_parser())]
    llama_build: Option<PathBuf>,
    /// test-backend-ops over every op (one run) instead of the default op list.
    #[arg(long)]
    full: bool,
    /// Only these works, comma-separated: llama-simple, backend-ops, "backend-ops ADD",
    /// "backend-ops CUDA0", ctest.
    #[arg(long, value_name = "WORK")]
    only: Option<String>,
    /// The GGUF model of the generation works (default: the pinned SmolLM2; required from a
    /// bundle).
    #[arg(long, value_name = "FILE", value_parser = bundle::caller_path_parser())]
    model: Option<PathBuf>,
    /// Layers offloaded (-ngl) in the partial-offload generation, on builds with a device
    /// besides the CPU (full and no offload run too).
    #[arg(long, value_name = "N", default_value_t = 8)]
    partial_ngl: u32,
    /// Leave out the ctest tests with this label, in both arms (repeatable; tests labelled
    /// `model`, which need a downloaded model, are always left out). `./ab test` leaves out
    /// `python`: test-jinja-py, llama.cpp's template engine against Python's jinja2.
    #[arg(long, value_name = "LABEL", value_parser = job::ctest_label)]
    ctest_exclude_label: Vec<String>,
    /// Skip the in-place reproducer's three arms (stock, patched, ours), which the job runs
    /// after the two-arm work when the arms are the default ones (no --a/--b/--llama-build).
    #[arg(long)]
    no_repro: bool,
    /// Skip the placement pages: by default the generation works run with GGML_SCHED_DUMP
    /// (arm B once more with GGML_SCHED_INPLACE_RULE=0) and `ab view` renders their records
    /// into target/ab/view/, listed in report.json under `pages` (docs/sched-view.md).
    #[arg(long)]
    no_view: bool,
}

/// Prints a harness message on stderr, prefixed `[ab]`.
pub fn say(msg: &str) {
    eprintln!("[ab] {msg}");
}

/// `12.3 s`, `4 min 05 s`.
pub fn fmt_secs(s: f64) -> String {
    // below a minute, tenths; from there whole seconds, rounded before they are split into
    // minutes, so that 959.6 s reads "16 min 00 s", never "15 min 60 s"
    if s < 59.95 {
        format!("{s:.1} s")
    } else {
        let whole = s.round() as u64;
        format!("{} min {:02} s", whole / 60, whole % 60)
    }
}

/// Makes sure the probe library exists (builds it with cargo when missing).
pub fn ensure_probe(paths: &Paths) -> Result<PathBuf> {
    let p = paths.probe();
    if paths.bundle.is_some() && !p.is_file() {
        anyhow::bail!("the bundle has no probe {}", p.display());
    }
    if !p.is_file() {
        say("building the probe: cargo build --release -p ab-probe");
        let st = std::process::Command::new("cargo")
            .args(["build", "--release", "-q", "-p", "ab-probe"])
            .current_dir(&paths.root)
            .status()
            .context("running cargo")?;
        if !st.success() || !p.is_file() {
            anyhow::bail!("could not build the probe {}", p.display());
        }
    }
    swap::check_search_path("LD_PRELOAD", &p)?;
    Ok(p)
}

/// The model a command was given (resolved), else the pinned SmolLM2 (fetched when missing);
/// from a bundle, which carries no pins' cache, a model must be given.
pub(crate) fn default_model(paths: &Paths, given: Option<&Path>) -> Result<PathBuf> {
    match given {
        Some(m) => {
            let m = m
                .canonicalize()
                .with_context(|| format!("--model {}", m.display()))?;
            check_gguf(&m)?;
            Ok(m)
        }
        None if paths.bundle.is_some() => {
            anyhow::bail!("from a bundle, name the model: --model FILE")
        }
        None => Ok(pins::Pins::load(&paths.root)?.ensure_model(&paths.target)?),
    }
}

/// Refuses a model that is not a GGUF file (its first four bytes are `GGUF`), before any run
/// fails on it in both arms.
pub(crate) fn check_gguf(model: &Path) -> Result<()> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(model)
        .and_then(|mut f| f.read_exact(&mut magic))
        .with_context(|| format!("--model {}: cannot read it", model.display()))?;
    if &magic != b"GGUF" {
        anyhow::bail!(
            "--model {} is not a GGUF file (it starts with {:?}, not \"GGUF\")",
            model.display(),
            String::from_utf8_lossy(&magic)
        );
    }
    Ok(())
}

pub(crate) fn default_build(paths: &Paths, given: Option<PathBuf>) -> Result<PathBuf> {
    if given.is_none() && paths.bundle.is_some() {
        anyhow::bail!("from a bundle, name the llama.cpp build: --llama-build DIR");
    }
    let d = given.unwrap_or_else(|| paths.stock_build());
    d.canonicalize().with_context(|| {
        format!(
            "llama.cpp build {} not found (run `./ab build-stock`, or pass --llama-build DIR)",
            d.display()
        )
    })
}

fn exec(paths: &Paths, a: ExecArgs) -> Result<u8> {
    let build = default_build(paths, a.llama_build)?;
    // What the user named is checked before the probe is built, which can take a while.
    let lib = lib_store::resolve(&paths.ab_dir(), &a.lib)?;
    let program = paths::program(&build, &a.command[0])?;
    // The program runs in the caller's folder: one removed since the call (or a folder given
    // in AB_CALLER_DIR that is none) would fail the start with an error that names the
    // program, which is there.
    let dir = bundle::caller_dir();
    if let Some(d) = dir.filter(|d| !d.is_dir()) {
        anyhow::bail!(
            "the folder ab was called from, {}, is no longer there (or is not a folder): \
             `ab exec` runs its program in it",
            d.display()
        );
    }
    let probe = ensure_probe(paths)?;
    let mut arm = swap::Arm::prepare(&paths.ab_dir(), &a.arm, &lib, a.backend.as_deref())?;
    // Kept only once it passed the checks: the store lists files that can be run.
    abi::check_arms(&build, std::slice::from_mut(&mut arm))?;
    lib_store::keep(&paths.ab_dir(), &arm.resolved, &arm.sha256)?;
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "program".into());
    say(&format!(
        "exec {} with libggml-base {} (sha256 {}) via {}",
        program.display(),
        arm.resolved.display(),
        arm.sha256,
        arm.lib_copy.display()
    ));
    let o = swap::run(
        &paths.ab_dir(),
        &probe,
        &arm,
        &swap::Job {
            name: &name,
            program: program.clone(),
            args: a.command[1..].iter().map(Into::into).collect(),
            timeout: Duration::from_secs(
                std::env::var("AB_TIMEOUT_S")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(24 * 3600),
            ),
            echo: true,
            expect_base: true,
            // The program and its arguments are the user's, as if they ran it themselves.
            dir,
        },
        &mut proc::Quiet,
    )?;
    say(&format!(
        "{} ended: {} after {}",
        name,
        o.finished.ended(),
        fmt_secs(o.finished.seconds)
    ));
    say("libraries mapped (name, path, sha256), read inside the process:");
    for l in proof::library_lines(&o.proof) {
        say(&format!("  {l}"));
    }
    for n in &o.proof.notes {
        say(&format!("note: {n}"));
    }
    say(&proof::summary(&o.proof));
    say(&format!(
        "log {}; probe records {}",
        o.log.display(),
        o.probe_file.display()
    ));
    if !o.proof.ok {
        return Ok(3);
    }
    Ok(o.finished.shell_code().clamp(0, 255) as u8)
}

/// Runs a workspace tool as a subcommand (like cargo's external subcommands): the workspace
/// binary named `NAME` or `ab-NAME` (else the first binary of the package of that name) is
/// built with `cargo build --release -q -p PKG --bin BIN`, then it runs
/// with the remaining arguments and the harness's locations in `AB_WORKSPACE`,
/// `AB_STOCK_BUILD` and `AB_PROBE`. Unknown names fail with exit code 2.
fn external(paths: &Paths, args: Vec<OsString>) -> Result<u8> {
    let name = args
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(b) = &paths.bundle {
        return bundled_tool(paths, b, &name, &args[1..]);
    }
    let tools = ours::workspace_binaries(paths)?;
    let wanted = [name.clone(), format!("ab-{name}")];
    // A binary of that name in any workspace package, else a package of that name.
    let found = wanted
        .iter()
        .find_map(|w| tools.iter().find(|(_, b)| b == w))
        .or_else(|| {
            wanted
                .iter()
                .find_map(|w| tools.iter().find(|(p, _)| p == w))
        })
        .cloned();
    let Some((pkg, bin)) = found else {
        say(&format!(
            "error: unknown subcommand `{name}`: not built into ab, and no workspace binary or \
             package named `{name}` or `ab-{name}` provides it (see `ab --help`)"
        ));
        return Ok(2);
    };
    let st = std::process::Command::new("cargo")
        .args(["build", "--release", "-q", "-p", &pkg, "--bin", &bin])
        .current_dir(&paths.root)
        .status()
        .context("running cargo")?;
    if !st.success() {
        anyhow::bail!(
            "`cargo build --release -p {pkg}` failed: the tool for `{name}` does not build"
        );
    }
    let exe = paths.target.join("release").join(&bin);
    run_tool(paths, &exe, &name, &args[1..])
}

/// `ab NAME ARGS` from a bundle: the bundle's binary `NAME` (or `ab-NAME`), as built.
fn bundled_tool(
    paths: &Paths,
    bundle: &std::path::Path,
    name: &str,
    args: &[OsString],
) -> Result<u8> {
    let Some(exe) = [name.to_string(), format!("ab-{name}")]
        .iter()
        .map(|n| bundle.join(n))
        .find(|p| p.is_file())
    else {
        say(&format!(
            "error: unknown subcommand `{name}`: not built into ab, and the bundle {} has no \
             binary `{name}` or `ab-{name}` (see `ab --help`)",
            bundle.display()
        ));
        return Ok(2);
    };
    run_tool(paths, &exe, name, args)
}

/// Runs a tool binary with the harness's locations in its environment; its exit status, or
/// 128 + the signal that killed it. It runs from the root (the bundle's folder in a bundle),
/// where its own default paths (`target/view`) are, and is told the user's folder
/// ([`bundle::caller_env`]): `args` are the user's, and their relative paths are taken from
/// there.
fn run_tool(paths: &Paths, exe: &std::path::Path, name: &str, args: &[OsString]) -> Result<u8> {
    let mut cmd = std::process::Command::new(exe);
    cmd.args(args)
        .current_dir(&paths.root)
        .env("AB_WORKSPACE", &paths.root)
        .env("AB_STOCK_BUILD", paths.stock_build())
        .env("AB_PROBE", paths.probe());
    if let Some((var, dir)) = bundle::caller_env() {
        cmd.env(var, dir);
    }
    // A tool (the reproducer, writing its report) must not go on after the harness that
    // holds the job lock is gone.
    bundle::die_with_parent(&mut cmd);
    let st = cmd
        .status()
        .with_context(|| format!("running {}", exe.display()))?;
    use std::os::unix::process::ExitStatusExt;
    Ok(match (st.code(), st.signal()) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(sig)) => {
            say(&format!("{name} was killed by {}", proc::signal_name(sig)));
            (128 + sig).clamp(0, 255) as u8
        }
        _ => 1,
    })
}

/// The name of a command that needs the source workspace (it fetches the pins, builds with
/// cargo or runs the test suite), when `cmd` is one.
fn workspace_only(cmd: &Cmd) -> Option<&'static str> {
    match cmd {
        Cmd::Fetch => Some("fetch"),
        Cmd::BuildStock { .. } => Some("build-stock"),
        Cmd::BuildOurs => Some("build-ours"),
        Cmd::Test => Some("test"),
        _ => None,
    }
}

fn dispatch(paths: &Paths, cmd: Cmd) -> Result<u8> {
    if let (Some(name), Some(_)) = (workspace_only(&cmd), &paths.bundle) {
        anyhow::bail!(
            "`ab {name}` needs the source workspace (a clone with cargo: it fetches, builds or \
             tests), not a bundle; from a bundle, run `ab ab`, `ab exec`, `ab rpc`, `ab pipeline`, \
             `ab store`, `ab view` or `ab bench gpu` against a llama.cpp build (--llama-build DIR)"
        );
    }
    match cmd {
        Cmd::Fetch => {
            let pins = pins::Pins::load(&paths.root)?;
            let t = std::time::Instant::now();
            let up = pins.ensure_upstream(&paths.target)?;
            let model = pins.ensure_model(&paths.target)?;
            say(&format!("upstream: {}", up.display()));
            say(&format!("model:    {}", model.display()));
            say(&format!(
                "fetch: done in {}",
                fmt_secs(t.elapsed().as_secs_f64())
            ));
            Ok(0)
        }
        Cmd::BuildStock { force, all } => {
            let targets = if all {
                stock::Targets::All
            } else {
                stock::Targets::Harness
            };
            stock::ensure(paths, force, targets)?;
            Ok(0)
        }
        Cmd::BuildOurs => {
            ours::build(paths)?;
            Ok(0)
        }
        Cmd::Exec(a) => exec(paths, a),
        Cmd::Ab(a) => {
            // The reproducer's arms are fixed (stock, patched, ours of this checkout), so it
            // runs only when the two-arm work uses the default arms too.
            let default_arms = a.a.is_none() && a.b.is_none() && a.llama_build.is_none();
            let with_repro = default_arms && !a.no_repro;
            let _job_lock = job::lock(paths)?;
            let r = job::run(
                paths,
                &job::AbOptions {
                    a: a.a,
                    b: a.b,
                    backend: a.backend,
                    llama_build: a.llama_build,
                    full: a.full,
                    only: a.only,
                    model: a.model,
                    partial_ngl: a.partial_ngl,
                    ctest_exclude_labels: a.ctest_exclude_label,
                    view: !a.no_view,
                },
            )?;
            let repro_code = if with_repro {
                say("in-place reproducer: stock, patched and ours on HRX0 and CPU (`ab repro`)");
                let stale = paths.target.join("repro").join("report.json");
                if stale.exists() {
                    std::fs::remove_file(&stale)
                        .with_context(|| format!("removing {}", stale.display()))?;
                }
                let code = external(paths, vec!["repro".into()])?;
                merge_repro(paths)?;
                code
            } else {
                if !default_arms && !a.no_repro {
                    say(
                        "in-place reproducer: not run (its three arms are fixed: it runs with \
                         the default arms and build; `ab repro` runs it alone)",
                    );
                }
                0
            };
            // The reproducer's output comes after the job's table: repeat the verdict last.
            let c = &r.comparison;
            say(&format!(
                "main job: {} work{} in arms {} and {}; proofs {}; the arms {}; report {}",
                c.runs.len(),
                if c.runs.len() == 1 { "" } else { "s" },
                r.arms[0].name,
                r.arms[1].name,
                if c.proofs_ok { "OK" } else { "FAILED" },
                if c.all_equal { "agree" } else { "DIFFER" },
                paths.ab_dir().join("report.json").display()
            ));
            if !c.proofs_ok {
                say("FAILED: a run did not map the intended libggml-base (see PROOF FAILED above)");
                return Ok(1);
            }
            if !c.all_equal {
                say("the arms differ (see the table)");
                return Ok(3);
            }
            if repro_code != 0 {
                say("the in-place reproducer failed (see its table above)");
                return Ok(4);
            }
            Ok(0)
        }
        Cmd::Test => testrun::run(paths),
        Cmd::RunpathTrap(b) => trap::run(paths, b.llama_build),
        Cmd::SwapCheck(b) => selftest::swap_check(paths, b.llama_build),
        Cmd::AbiOf { file } => Ok(abi_of(&file)),
        Cmd::Rpc {
            llama_build,
            model,
            ngl,
            port,
        } => rpc::run(
            paths,
            &rpc::RpcOptions {
                llama_build,
                model,
                ngl,
                port,
            },
        ),
        Cmd::Pipeline(o) => pipeline::run(paths, &o),
        Cmd::Store => {
            let all = lib_store::list(&paths.ab_dir())?;
            for e in &all {
                println!("{}  {}", e.sha256, e.sources.join(", "));
            }
            say(&format!(
                "{} libraries in {}",
                all.len(),
                lib_store::dir(&paths.ab_dir()).display()
            ));
            Ok(0)
        }
        Cmd::Bundle { out } => pack::make(paths, out).map(|_| 0),
        Cmd::External(args) => external(paths, args),
    }
}

/// Copies `target/repro/report.json` (the reproducer's three arms, each named by the sha256
/// of the libggml-base its process mapped) into `target/ab/report.json` under
/// `inplace_reproducer`, so the main job's report holds every arm.
fn merge_repro(paths: &Paths) -> Result<()> {
    let repro = paths.target.join("repro").join("report.json");
    let main = paths.target.join("ab").join("report.json");
    let read = |p: &std::path::Path| -> Result<serde_json::Value> {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))
    };
    let mut report = read(&main)?;
    let value = if repro.exists() {
        read(&repro)?
    } else {
        serde_json::Value::String(format!("{} was not written", repro.display()))
    };
    if let Some(obj) = report.as_object_mut() {
        obj.insert("inplace_reproducer".into(), value);
    }
    std::fs::write(&main, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", main.display()))?;
    say(&format!(
        "report: {} (with inplace_reproducer)",
        main.display()
    ));
    Ok(())
}

/// `ab abi-of FILE`: the identity of one libggml-base as one JSON line; 1 when it cannot be
/// read (the reason on stderr).
fn abi_of(file: &std::path::Path) -> u8 {
    match abi::read_in_process(file) {
        Ok(a) => {
            println!(
                "{}",
                serde_json::to_string(&a).expect("plain fields serialize")
            );
            0
        }
        Err(e) => {
            eprintln!("{e:#}");
            1
        }
    }
}

/// Environment variables that the README documents as paths the user gives: taken from the
/// folder they called the harness from, as the arguments are, since what reads them (the
/// build scripts of `build-ours`, the programs of a run, the compiler and pip the harness and
/// its tools start) runs elsewhere. The last three, [`COMMAND_VARS`], only when they hold a
/// `/`: a bare name is searched for (the dynamic loader's path, `PATH`), not a path from here.
const USER_PATH_VARS: [&str; 5] = [
    "GGML_AB_CACHE",
    "GGML_SCHED_DUMP",
    "GGML_BACKEND_PATH",
    "CC",
    "PYTHON",
];

/// Those of [`USER_PATH_VARS`] that name a file to load or run: a bare name is searched for.
const COMMAND_VARS: [&str; 3] = ["GGML_BACKEND_PATH", "CC", "PYTHON"];

/// The value to give `var`, one of [`USER_PATH_VARS`], in place of `value`: the absolute path
/// [`bundle::caller_path`] makes of a relative one, else None (an absolute or empty value,
/// which stays for the warning of what reads it, or a bare name of [`COMMAND_VARS`]).
fn resolved_path_var(var: &str, value: &OsStr) -> Option<PathBuf> {
    if COMMAND_VARS.contains(&var) && !value.as_encoded_bytes().contains(&b'/') {
        return None;
    }
    let p = Path::new(value);
    let resolved = bundle::caller_path(p);
    (resolved != p).then_some(resolved)
}

/// Rewrites each of [`USER_PATH_VARS`] that holds a relative path ([`resolved_path_var`]),
/// for this process and what it starts. Called at start, before any thread.
fn resolve_path_vars() {
    for var in USER_PATH_VARS {
        if let Some(p) = std::env::var_os(var).and_then(|v| resolved_path_var(var, &v)) {
            std::env::set_var(var, p);
        }
    }
}

fn main() -> ExitCode {
    // A reader that went away (`./ab ab ... 2>&1 | head`) ends the harness as it ends any
    // command-line tool, and its runs with it (their process groups go with the harness,
    // `bundle::GroupGuard`), instead of a job that goes on without output for an hour and
    // then panics at its table. The harness writes to no pipe or socket but its own output
    // (children get a null stdin; the RPC checks only connect), and the programs it starts
    // get the default disposition from `Command` anyway.
    // SAFETY: setting a signal's disposition to the default, before any other thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    // First, while this is the only thread, and before the arguments (whose relative paths
    // are taken from that folder) are parsed.
    bundle::take_caller_dir();
    resolve_path_vars();
    proc::install_interrupt_handler();
    let cli = Cli::parse();
    let cmd = cli.cmd.unwrap_or(Cmd::Ab(AbArgs::default()));
    // Needs no workspace: it runs as a child of the harness, wherever the harness runs.
    if let Cmd::AbiOf { file } = &cmd {
        return ExitCode::from(abi_of(file));
    }
    let result = Paths::discover().and_then(|p| dispatch(&p, cmd));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            say(&format!("error: {e:#}"));
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{fmt_secs, resolved_path_var};
    use std::ffi::OsStr;
    use std::path::Path;

    #[test]
    fn relative_path_variables_are_taken_from_the_callers_folder() {
        let caller = bundle::caller_dir().unwrap();
        for var in super::USER_PATH_VARS {
            assert_eq!(
                resolved_path_var(var, OsStr::new("x/dir")),
                Some(caller.join("x/dir")),
                "{var}"
            );
            assert_eq!(
                resolved_path_var(var, OsStr::new("/abs/dir")),
                None,
                "{var}"
            );
            assert_eq!(resolved_path_var(var, OsStr::new("")), None, "{var}");
        }
        // A bare file name is the loader's (or PATH's) to search for: not a path from here.
        for (var, name) in [
            ("GGML_BACKEND_PATH", "libggml-cuda.so"),
            ("CC", "gcc"),
            ("PYTHON", "python3"),
        ] {
            assert_eq!(resolved_path_var(var, OsStr::new(name)), None, "{var}");
        }
        assert_eq!(
            resolved_path_var("GGML_SCHED_DUMP", OsStr::new("dumps")),
            Some(caller.join(Path::new("dumps")))
        );
    }

    #[test]
    fn durations_round_before_they_split_into_minutes() {
        assert_eq!(fmt_secs(7.74), "7.7 s");
        assert_eq!(fmt_secs(59.96), "1 min 00 s");
        assert_eq!(fmt_secs(959.6), "16 min 00 s");
        assert_eq!(fmt_secs(2679.4), "44 min 39 s");
        assert_eq!(fmt_secs(3600.0), "60 min 00 s");
    }
}
