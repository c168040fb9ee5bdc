//! `ab pipeline`: the scheduler's pipeline parallelism, checked by perplexity. llama.cpp turns
//! it on when a model is split by layers over more than one device: the scheduler then keeps
//! several copies of the graph inputs and orders the devices with events, so that one
//! micro-batch (`-ub`) is computed on the second device while the next enters the first.
//! Upstream has got this wrong before (a graph evaluated with the wrong copy, a missing wait:
//! perplexity far off with `-ub 512 -b 2048` on two devices). `llama-perplexity` over a fixed
//! text, `-c 2048 -b 2048 -ub 512` (four micro-batches a batch), runs on one device and on
//! two, in the stock arm and in ours, every process proven. It passes when each two-device run
//! says "pipeline parallelism enabled" and its estimate is within 0.1 % of the same arm's
//! one-device estimate, and when the arms' estimates agree within 0.1 % too.
//!
//! The devices default to two simulated HRX devices (`GGML_HRX_DEVICES=2`, our HRX backend):
//! on a machine without a GPU that is the only way to have two. On a build with two GPUs the
//! same command takes `--one CUDA0 --two CUDA0,CUDA1`. With one GPU, `--two RPC0,CUDA0` pairs
//! the card with itself through ggml-rpc: a configuration that names `RPC0` starts a
//! `ggml-rpc-server` of the same arm on a loopback port for that run (both ends the arm's
//! library, the server proven like the client), and llama.cpp enables pipeline parallelism
//! across the two devices.

use crate::paths::{self, Paths};
use crate::proc::{Stream, Watcher};
use crate::rpc;
use crate::swap::{self, Arm, Job};
use crate::{fmt_secs, say};
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The largest relative difference between two perplexity estimates that still counts as
/// equal (0.1 %, issue 18's bound). On simulated devices the kernels are the CPU's in every
/// configuration, so the estimates are in fact equal to the last printed digit.
pub const TOLERANCE: f64 = 1e-3;

/// What `ab pipeline` is given (its command-line options).
#[derive(Debug, clap::Args)]
pub struct PipelineOptions {
    /// A llama.cpp build folder (default: target/llama-stock).
    #[arg(long, value_name = "DIR")]
    pub llama_build: Option<PathBuf>,
    /// The GGUF model (default: the pinned SmolLM2; required from a bundle).
    #[arg(long, value_name = "FILE")]
    pub model: Option<PathBuf>,
    /// The text (default: docs/build.md of the pinned llama.cpp tree, 43 KB; required from a
    /// bundle).
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
    /// The one-device configuration (-dev).
    #[arg(long, default_value = "HRX0")]
    pub one: String,
    /// The two-device configuration (-dev); HRX devices get GGML_HRX_DEVICES (one more than
    /// the highest named) unless it is set.
    #[arg(long, default_value = "HRX0,HRX1")]
    pub two: String,
    /// A backend library for GGML_BACKEND_PATH, in both arms (default: our HRX backend when a
    /// device named is an HRX one).
    #[arg(long, value_name = "FILE")]
    pub backend: Option<PathBuf>,
    /// Chunks of 2048 tokens to evaluate (at least 1).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub chunks: u32,
    /// The loopback port of the `ggml-rpc-server` a configuration naming `RPC0` starts.
    #[arg(long, default_value_t = 50753)]
    pub rpc_port: u16,
    /// Then also run ours on the two devices with a planted fault
    /// (`GGML_SCHED_TEST_FAULT=wrong-pipeline-copy`: split inputs copied into the next pipeline
    /// copy) and require the check to catch it: the check's own test.
    #[arg(long)]
    pub self_test: bool,
}

/// A watcher that shows nothing.
struct Quiet;
impl Watcher for Quiet {
    fn line(&mut self, _s: Stream, _l: &str) {}
}

/// The estimate llama-perplexity prints last: `Final estimate: PPL = 9.0672 +/- 0.32978`.
pub fn final_estimate(log: &str) -> Option<f64> {
    log.lines()
        .rev()
        .find_map(|l| l.split("Final estimate: PPL = ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite())
}

/// |a - b| / b, the relative difference of `a` from the reference `b`.
pub fn relative(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

/// `--one` names one device and `--two` at least two distinct ones: otherwise the comparison
/// would not be one device against a split.
pub fn check_devices(one: &str, two: &str) -> Result<()> {
    let list = |s: &str| -> Vec<String> {
        s.split(',')
            .map(|d| d.trim().to_string())
            .filter(|d| !d.is_empty())
            .collect()
    };
    let (a, b) = (list(one), list(two));
    if a.len() != 1 {
        bail!("--one {one:?} must name exactly one device");
    }
    let mut distinct = b.clone();
    distinct.sort();
    distinct.dedup();
    if b.len() < 2 || distinct.len() != b.len() {
        bail!("--two {two:?} must name at least two distinct devices");
    }
    if let Some(d) = a
        .iter()
        .chain(&b)
        .find(|d| d.starts_with("RPC") && d.as_str() != "RPC0")
    {
        bail!("{d}: `ab pipeline` starts one ggml-rpc-server a run, whose device is RPC0");
    }
    Ok(())
}

/// The HRX device count a split needs: one more than the highest `HRXn` it names; `None`
/// when it names none.
pub fn hrx_devices_needed(devices: &str) -> Option<usize> {
    devices
        .split(',')
        .filter_map(|d| d.trim().strip_prefix("HRX"))
        .filter_map(|n| n.parse::<usize>().ok())
        .max()
        .map(|n| n + 1)
}

/// The scheduler copies llama.cpp reports last (`sched_reserve: ... sched copies = 4`): after
/// a fallback without pipeline parallelism it reserves again and says 1.
pub fn sched_copies(log: &str) -> Option<u32> {
    log.lines()
        .rev()
        .find_map(|l| l.split("sched copies = ").nth(1))
        .and_then(|rest| rest.trim().parse().ok())
}

/// The first line of a failed run's log that says why (an error or an invalid argument).
fn why_failed(log: &str) -> Option<&str> {
    log.lines().map(str::trim).find(|l| {
        let l = l.to_ascii_lowercase();
        l.contains("error") || l.contains("invalid") || l.contains("failed")
    })
}

/// One run: an arm, a device configuration, and what it gave.
struct RunResult {
    arm: usize,
    devices: String,
    ppl: Option<f64>,
    /// The log said "pipeline parallelism enabled" and its last reserve had more than one
    /// scheduler copy.
    pipeline: bool,
    /// The scheduler copies of the last reserve, as llama.cpp logged them.
    copies: Option<u32>,
    ok: bool,
}

/// Runs the four runs (two arms × two configurations); 0 when every check holds.
pub fn run(paths: &Paths, o: &PipelineOptions) -> Result<u8> {
    check_devices(&o.one, &o.two)?;
    // Settings only our library reads at run time would make the arms differ by setting, not
    // by library (stock fixes its copies at build time), and the fault is the self-test's.
    for var in ["GGML_SCHED_MAX_COPIES", "GGML_SCHED_TEST_FAULT"] {
        if std::env::var_os(var).is_some() {
            bail!(
                "{var} is set: only our arm would read it (stock fixes its pipeline copies at \
                 build time, and the fault is --self-test's); unset it for `ab pipeline`"
            );
        }
    }
    let build = crate::default_build(paths, o.llama_build.clone())?;
    let probe = crate::ensure_probe(paths)?;
    let model = crate::default_model(paths, o.model.as_deref())?;
    let text = match &o.text {
        Some(t) => t.clone(),
        None if paths.bundle.is_some() => bail!("from a bundle, name the text: --text FILE"),
        None => pins::Pins::load(&paths.root)?
            .upstream_dir(&paths.target)
            .join("docs/build.md"),
    };
    if !text.is_file() {
        bail!("the text {} is not a file", text.display());
    }
    // Builds (or, from a bundle, finds) our libraries, the HRX backend among them.
    let ours = crate::ours::build(paths)?.base;
    let hrx_devices = [&o.one, &o.two]
        .map(|d| hrx_devices_needed(d))
        .into_iter()
        .max()
        .flatten();
    let backend = match (&o.backend, hrx_devices) {
        (Some(b), _) => Some(b.clone()),
        (None, Some(_)) => Some(paths.ours_lib().join("libggml-hrx.so")),
        (None, None) => None,
    };
    if let Some(n) = hrx_devices {
        if std::env::var_os("GGML_HRX_DEVICES").is_none() {
            // Inherited by every run: as many simulated devices as the configurations name.
            std::env::set_var("GGML_HRX_DEVICES", n.to_string());
        }
    }
    let ab_dir = paths.ab_dir().join("pipeline");
    let stock = paths::bin_dir(&build).join("libggml-base.so.0");
    let mut arms = [
        Arm::prepare(&ab_dir, "stock", &stock, backend.as_deref())?,
        Arm::prepare(&ab_dir, "ours", &ours, backend.as_deref())?,
    ];
    crate::abi::check_arms(&build, &mut arms)?;
    let runner = Runner {
        program: paths::program(&build, "llama-perplexity")?,
        build: build.clone(),
        ab_dir,
        probe,
        arms,
        model,
        text,
        chunks: o.chunks,
        rpc_port: o.rpc_port,
    };
    say(&format!(
        "pipeline: model {}, text {}, -c 2048 -b 2048 -ub 512, {} chunks; devices {} and {}",
        runner.model.display(),
        runner.text.display(),
        o.chunks,
        o.one,
        o.two
    ));
    let mut results = Vec::new();
    for (round, devices) in [&o.one, &o.two].into_iter().enumerate() {
        // A B for one device, B A for two: neither arm always runs first.
        let order = if round == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            results.push(runner.run(k, devices, "")?);
        }
    }
    let mut pass = judge(&results, &runner.arms, &o.one, &o.two);
    if o.self_test {
        pass &= self_test(&runner, o, &results)?;
    }
    say(if pass {
        "pipeline: PASS"
    } else {
        "pipeline: FAIL"
    });
    Ok(u8::from(!pass))
}

/// The check's own test: ours on the two devices with the `wrong-pipeline-copy` fault
/// planted must give an estimate outside the tolerance of its one-device run.
fn self_test(runner: &Runner, o: &PipelineOptions, results: &[RunResult]) -> Result<bool> {
    let reference = results
        .iter()
        .find(|r| r.arm == 1 && r.devices == o.one)
        .and_then(|r| r.ppl);
    let Some(reference) = reference else {
        say("pipeline: self-test: no one-device estimate of ours to compare with");
        return Ok(false);
    };
    // Inherited by the one run below only (the variable is removed after it).
    std::env::set_var("GGML_SCHED_TEST_FAULT", "wrong-pipeline-copy");
    let faulty = runner.run(1, &o.two, "-fault");
    std::env::remove_var("GGML_SCHED_TEST_FAULT");
    let faulty = faulty?;
    let caught = match faulty.ppl {
        Some(p) => relative(p, reference) > TOLERANCE,
        // A run that fails outright, its copies in place, is caught too, if less informatively.
        None => true,
    };
    // A run that never reached its pipeline copies (one that could not start, say) tests
    // nothing, whatever its estimate: it is judged on that alone.
    let verdict = if !faulty.pipeline {
        "the run had no pipeline copies, so the fault could not act: not a test (FAIL)"
    } else if caught {
        "caught (PASS)"
    } else {
        "NOT caught (FAIL)"
    };
    say(&format!(
        "pipeline: self-test: ours on {} with split inputs sent to the wrong pipeline copy: PPL {} \
         against {reference:.4}: {verdict}",
        o.two,
        faulty.ppl.map_or("none".into(), |p| format!("{p:.4}")),
    ));
    Ok(caught && faulty.pipeline)
}

/// What every run shares: the program, the arms, the model, the text and the chunks.
struct Runner {
    ab_dir: PathBuf,
    build: PathBuf,
    probe: PathBuf,
    program: PathBuf,
    arms: [Arm; 2],
    model: PathBuf,
    text: PathBuf,
    chunks: u32,
    /// The port of the server a configuration naming RPC0 starts.
    rpc_port: u16,
}

/// Whether a device list names the RPC server's device.
fn names_rpc(devices: &str) -> bool {
    devices.split(',').any(|d| d.trim() == "RPC0")
}

/// llama-perplexity's arguments for one run: `-c 2048 -b 2048 -ub 512`, every layer offloaded
/// (`-ngl 99`) to `devices` (`-dev`, comma-separated), `chunks` chunks, log level 4 (the
/// level at which llama_context logs "pipeline parallelism enabled"). With `rpc_port` (a
/// configuration naming RPC0) also `--rpc 127.0.0.1:PORT`, and before `-dev`: llama.cpp's argument parser
/// looks each `-dev` name up as it reads it, and RPC0 exists only once `--rpc` has
/// registered it ("invalid device: RPC0" otherwise).
fn perplexity_args(
    model: &Path,
    text: &Path,
    chunks: u32,
    devices: &str,
    rpc_port: Option<u16>,
) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(port) = rpc_port {
        args.extend(["--rpc".into(), format!("127.0.0.1:{port}")]);
    }
    let chunks = chunks.to_string();
    let (model, text) = (model.display().to_string(), text.display().to_string());
    args.extend(
        [
            "-m", &model, "-f", &text, "-c", "2048", "-b", "2048", "-ub", "512", "--chunks",
            &chunks, "-ngl", "99", "-dev", devices, "-lv", "4",
        ]
        .map(String::from),
    );
    args
}

impl Runner {
    /// One llama-perplexity run in `arms[k]` on `devices`; `tag` ends the run's file names.
    fn run(&self, k: usize, devices: &str, tag: &str) -> Result<RunResult> {
        let (arms, model, text, chunks) = (&self.arms, &self.model, &self.text, self.chunks);
        let started = Instant::now();
        let name = format!("perplexity-{}{tag}", devices.replace(',', "-"));
        // A configuration with RPC0 gets a server of the same arm for this run alone.
        let rpc_port = names_rpc(devices).then_some(self.rpc_port);
        let args = perplexity_args(model, text, chunks, devices, rpc_port);
        let server = if let Some(port) = rpc_port {
            let server_tag = format!("{}-{name}", arms[k].name);
            Some(rpc::Server::start(
                &self.ab_dir,
                &self.probe,
                &self.build,
                &arms[k],
                port,
                &server_tag,
            )?)
        } else {
            None
        };
        let job = Job {
            name: &name,
            program: self.program.clone(),
            args: args.iter().map(Into::into).collect(),
            timeout: Duration::from_secs(1800),
            echo: false,
            expect_base: true,
        };
        let outcome = swap::run(&self.ab_dir, &self.probe, &arms[k], &job, &mut Quiet);
        let server_ok = match server {
            Some(srv) => srv.stop(&arms[k])?.ok(),
            None => true,
        };
        let outcome = outcome?;
        let log = std::fs::read_to_string(&outcome.log).unwrap_or_default();
        let ppl = final_estimate(&log);
        let copies = sched_copies(&log);
        let pipeline =
            log.contains("pipeline parallelism enabled") && copies.is_some_and(|c| c > 1);
        let ok = outcome.finished.success() && outcome.proof.ok && ppl.is_some() && server_ok;
        say(&format!(
            "pipeline: {} on {}: PPL {}{}, {} ({}; log {})",
            arms[k].name,
            devices,
            ppl.map_or("none".into(), |p| format!("{p:.4}")),
            if pipeline {
                ", pipeline parallelism enabled"
            } else {
                ""
            },
            if !outcome.proof.ok {
                format!("proof FAILED: {}", outcome.proof.errors.join("; "))
            } else if !outcome.finished.success() || ppl.is_none() {
                format!(
                    "llama-perplexity {}{}",
                    outcome.finished.ended(),
                    why_failed(&log).map_or(String::new(), |w| format!(": {w}"))
                )
            } else if !server_ok {
                "the RPC server's proof or connection FAILED".to_string()
            } else {
                format!(
                    "proof OK, sched copies {}",
                    copies.map_or("?".into(), |c| c.to_string())
                )
            },
            fmt_secs(started.elapsed().as_secs_f64()),
            outcome.log.display()
        ));
        Ok(RunResult {
            arm: k,
            devices: devices.to_string(),
            ppl,
            pipeline,
            copies,
            ok,
        })
    }
}

/// Prints each comparison; true when every check holds.
fn judge(results: &[RunResult], arms: &[Arm; 2], one: &str, two: &str) -> bool {
    let get = |k: usize, d: &str| results.iter().find(|r| r.arm == k && r.devices == d);
    let mut pass = results.iter().all(|r| r.ok);
    for (k, arm) in arms.iter().enumerate() {
        let (Some(a), Some(b)) = (get(k, one), get(k, two)) else {
            pass = false;
            continue;
        };
        if a.ok && a.copies != Some(1) {
            say(&format!(
                "pipeline: {}: the run on {one} had {} scheduler copies, not 1: it is not the \
                 one-device reference",
                arm.name,
                a.copies
                    .map_or("an unknown number of".into(), |c| c.to_string())
            ));
            pass = false;
        }
        if b.ok && !b.pipeline {
            say(&format!(
                "pipeline: {}: the run on {two} did not say \"pipeline parallelism enabled\" \
                 with more than one scheduler copy (last: {}): the split did not exercise the \
                 pipeline copies",
                arm.name,
                b.copies.map_or("none logged".into(), |c| c.to_string())
            ));
            pass = false;
        }
        if let (Some(p1), Some(p2)) = (a.ppl, b.ppl) {
            let d = relative(p2, p1);
            let within = d <= TOLERANCE;
            say(&format!(
                "pipeline: {}: {two} {p2:.4} against {one} {p1:.4}: {:.4} % {}",
                arm.name,
                d * 100.0,
                if within {
                    "(within 0.1 %)"
                } else {
                    "OVER 0.1 %"
                }
            ));
            pass &= within;
        }
    }
    for d in [one, two] {
        if let (Some(Some(a)), Some(Some(b))) = (get(0, d).map(|r| r.ppl), get(1, d).map(|r| r.ppl))
        {
            let r = relative(b, a);
            let within = r <= TOLERANCE;
            say(&format!(
                "pipeline: on {d}: {} {b:.4} against {} {a:.4}: {:.4} % {}",
                arms[1].name,
                arms[0].name,
                r * 100.0,
                if within {
                    "(within 0.1 %)"
                } else {
                    "OVER 0.1 %"
                }
            ));
            pass &= within;
        }
    }
    pass
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_final_estimate() {
        let log = "0.00.490.497 I perplexity: calculating perplexity over 6 chunks\n\
                   [1]14.4050,[2]9.6531,[3]9.6080,\n\
                   0.44.726.174 I Final estimate: PPL = 9.0672 +/- 0.32978\n";
        assert_eq!(final_estimate(log), Some(9.0672));
        assert_eq!(final_estimate("no estimate here"), None);
        assert_eq!(final_estimate("Final estimate: PPL = nan +/- nan"), None);
    }

    #[test]
    fn the_configurations_must_be_one_device_against_a_split() {
        assert!(check_devices("HRX0", "HRX0,HRX1").is_ok());
        assert!(check_devices("CUDA0", "CUDA0,CUDA1").is_ok());
        let e = check_devices("HRX0,HRX1", "HRX0,HRX1").unwrap_err();
        assert!(e.to_string().contains("--one"), "{e}");
        let e = check_devices("HRX0", "HRX0").unwrap_err();
        assert!(e.to_string().contains("--two"), "{e}");
        assert!(check_devices("HRX0", "HRX1,HRX1").is_err());
        assert!(check_devices("CUDA0", "RPC0,CUDA0").is_ok());
        let e = check_devices("CUDA0", "RPC0,RPC1").unwrap_err();
        assert!(e.to_string().contains("RPC1"), "{e}");
        assert!(names_rpc("RPC0, CUDA0") && !names_rpc("CUDA0,HRX0"));
    }

    #[test]
    fn rpc_is_registered_before_the_devices_are_named() {
        let (m, t) = (Path::new("m.gguf"), Path::new("t.txt"));
        let a = perplexity_args(m, t, 3, "RPC0,CUDA0", Some(50999));
        let at = |s: &str| a.iter().position(|x| x == s).unwrap();
        assert_eq!(a[at("--rpc") + 1], "127.0.0.1:50999");
        assert_eq!(a[at("-dev") + 1], "RPC0,CUDA0");
        assert!(at("--rpc") < at("-dev"), "{a:?}");
        assert_eq!(a[at("--chunks") + 1], "3");
        let b = perplexity_args(m, t, 1, "CUDA0", None);
        assert!(!b.iter().any(|x| x == "--rpc"), "{b:?}");
        assert_eq!(b.len(), a.len() - 2);
    }

    #[test]
    fn hrx_count_and_copies_are_read() {
        assert_eq!(hrx_devices_needed("HRX0,HRX1"), Some(2));
        assert_eq!(hrx_devices_needed("HRX0,HRX2"), Some(3));
        assert_eq!(hrx_devices_needed("CUDA0,CUDA1"), None);
        let log = "I sched_reserve: reserve took 6.83 ms, sched copies = 4\n\
                   W llama_context: compute buffer allocation failed, retrying without pipeline parallelism\n\
                   I sched_reserve: reserve took 5.10 ms, sched copies = 1\n";
        assert_eq!(sched_copies(log), Some(1), "the last reserve counts");
        assert_eq!(sched_copies("nothing"), None);
    }

    #[test]
    fn the_tolerance_is_relative_to_the_reference() {
        assert!(relative(9.0672, 9.0672) == 0.0);
        // 0.1 % of 10 is 0.01.
        assert!(relative(10.009, 10.0) <= TOLERANCE);
        assert!(relative(10.011, 10.0) > TOLERANCE);
        assert!(relative(9.989, 10.0) > TOLERANCE);
    }
}
