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
//! same command takes `--one CUDA0 --two CUDA0,CUDA1`.

use crate::paths::{self, Paths};
use crate::proc::{Stream, Watcher};
use crate::swap::{self, Arm, Job};
use crate::{fmt_secs, say};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The largest relative difference between two perplexity estimates that still counts as
/// equal (0.1 %, issue 18's bound). On simulated devices the kernels are the CPU's in every
/// configuration, so the estimates are in fact equal to the last printed digit.
pub const TOLERANCE: f64 = 1e-3;

/// What `ab pipeline` is given.
pub struct PipelineOptions {
    pub llama_build: Option<PathBuf>,
    pub model: Option<PathBuf>,
    /// The text (default: `docs/build.md` of the pinned llama.cpp tree).
    pub text: Option<PathBuf>,
    /// The one-device configuration (`-dev`), e.g. `HRX0`.
    pub one: String,
    /// The two-device configuration (`-dev`), e.g. `HRX0,HRX1`.
    pub two: String,
    /// A backend library for `GGML_BACKEND_PATH` (default: our HRX backend when a device
    /// named is an HRX one).
    pub backend: Option<PathBuf>,
    /// Chunks of 2048 tokens to evaluate (`--chunks`).
    pub chunks: u32,
    /// Then also run ours on the two devices with a planted fault (`GGML_SCHED_TEST_FAULT=
    /// wrong-pipeline-copy`: split inputs copied into the next pipeline copy) and require the
    /// check to catch it: the check's own test.
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

/// One run: an arm, a device configuration, and what it gave.
struct RunResult {
    arm: usize,
    devices: String,
    ppl: Option<f64>,
    pipeline: bool,
    ok: bool,
}

/// Runs the four runs (two arms × two configurations); 0 when every check holds.
pub fn run(paths: &Paths, o: &PipelineOptions) -> Result<u8> {
    let build = crate::default_build(paths, o.llama_build.clone())?;
    let probe = crate::ensure_probe(paths)?;
    let model = match &o.model {
        Some(m) => m
            .canonicalize()
            .with_context(|| format!("--model {}", m.display()))?,
        None if paths.bundle.is_some() => bail!("from a bundle, name the model: --model FILE"),
        None => pins::Pins::load(&paths.root)?.ensure_model(&paths.target)?,
    };
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
    let hrx = [&o.one, &o.two]
        .iter()
        .any(|d| d.split(',').any(|x| x.starts_with("HRX")));
    let backend = match (&o.backend, hrx) {
        (Some(b), _) => Some(b.clone()),
        (None, true) => {
            let lib = paths.ours_lib().join("libggml-hrx.so");
            if !lib.is_file() {
                crate::ours::build(paths)?;
            }
            Some(lib)
        }
        (None, false) => None,
    };
    if hrx && std::env::var_os("GGML_HRX_DEVICES").is_none() {
        // Inherited by every run: two simulated devices.
        std::env::set_var("GGML_HRX_DEVICES", "2");
    }
    let ab_dir = paths.ab_dir().join("pipeline");
    let stock = paths::bin_dir(&build).join("libggml-base.so.0");
    let ours = crate::ours::build(paths)?.base;
    let mut arms = [
        Arm::prepare(&ab_dir, "stock", &stock, backend.as_deref())?,
        Arm::prepare(&ab_dir, "ours", &ours, backend.as_deref())?,
    ];
    crate::abi::check_arms(&build, &mut arms)?;
    let program = paths::program(&build, "llama-perplexity")?;
    say(&format!(
        "pipeline: model {}, text {}, -c 2048 -b 2048 -ub 512, {} chunks; devices {} and {}",
        model.display(),
        text.display(),
        o.chunks,
        o.one,
        o.two
    ));
    let mut results = Vec::new();
    for (round, devices) in [&o.one, &o.two].into_iter().enumerate() {
        // A B for one device, B A for two: neither arm always runs first.
        let order = if round == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            results.push(one_run(
                &ab_dir, &probe, &program, &arms, k, devices, "", &model, &text, o.chunks,
            )?);
        }
    }
    let mut pass = judge(&results, &arms, &o.one, &o.two);
    if o.self_test {
        pass &= self_test(&ab_dir, &probe, &program, &arms, o, &model, &text, &results)?;
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
#[allow(clippy::too_many_arguments)]
fn self_test(
    ab_dir: &Path,
    probe: &Path,
    program: &Path,
    arms: &[Arm; 2],
    o: &PipelineOptions,
    model: &Path,
    text: &Path,
    results: &[RunResult],
) -> Result<bool> {
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
    let faulty = one_run(
        ab_dir, probe, program, arms, 1, &o.two, "-fault", model, text, o.chunks,
    );
    std::env::remove_var("GGML_SCHED_TEST_FAULT");
    let faulty = faulty?;
    let caught = match faulty.ppl {
        Some(p) => relative(p, reference) > TOLERANCE,
        // A run that fails outright is caught too, if less informatively.
        None => true,
    };
    say(&format!(
        "pipeline: self-test: ours on {} with split inputs sent to the wrong pipeline copy: PPL {} \
         against {reference:.4}: {}",
        o.two,
        faulty.ppl.map_or("none".into(), |p| format!("{p:.4}")),
        if caught {
            "caught (PASS)"
        } else {
            "NOT caught (FAIL)"
        }
    ));
    Ok(caught && faulty.pipeline)
}

/// One llama-perplexity run in `arms[k]` on `devices`; `tag` ends the run's file names.
#[allow(clippy::too_many_arguments)]
fn one_run(
    ab_dir: &Path,
    probe: &Path,
    program: &Path,
    arms: &[Arm; 2],
    k: usize,
    devices: &str,
    tag: &str,
    model: &Path,
    text: &Path,
    chunks: u32,
) -> Result<RunResult> {
    let started = Instant::now();
    let name = format!("perplexity-{}{tag}", devices.replace(',', "-"));
    let args: Vec<String> = [
        "-m",
        &model.display().to_string(),
        "-f",
        &text.display().to_string(),
        "-c",
        "2048",
        "-b",
        "2048",
        "-ub",
        "512",
        "--chunks",
        &chunks.to_string(),
        "-ngl",
        "99",
        "-dev",
        devices,
        // Level 4 logs llama_context's "pipeline parallelism enabled"; 3 (the default) not.
        "-lv",
        "4",
    ]
    .map(String::from)
    .to_vec();
    let job = Job {
        name: &name,
        program: program.to_path_buf(),
        args: args.iter().map(Into::into).collect(),
        timeout: Duration::from_secs(1800),
        echo: false,
        expect_base: true,
    };
    let outcome = swap::run(ab_dir, probe, &arms[k], &job, &mut Quiet)?;
    let log = std::fs::read_to_string(&outcome.log).unwrap_or_default();
    let ppl = final_estimate(&log);
    let pipeline = log.contains("pipeline parallelism enabled");
    let ok = outcome.finished.success() && outcome.proof.ok && ppl.is_some();
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
        } else if !outcome.finished.success() {
            format!("llama-perplexity {}", outcome.finished.ended())
        } else {
            "proof OK".into()
        },
        fmt_secs(started.elapsed().as_secs_f64()),
        outcome.log.display()
    ));
    Ok(RunResult {
        arm: k,
        devices: devices.to_string(),
        ppl,
        pipeline,
        ok,
    })
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
        if !b.pipeline {
            say(&format!(
                "pipeline: {}: the run on {two} did not say \"pipeline parallelism enabled\": \
                 the split did not exercise the pipeline copies",
                arm.name
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
    fn the_tolerance_is_relative_to_the_reference() {
        assert!(relative(9.0672, 9.0672) == 0.0);
        // 0.1 % of 10 is 0.01.
        assert!(relative(10.009, 10.0) <= TOLERANCE);
        assert!(relative(10.011, 10.0) > TOLERANCE);
        assert!(relative(9.989, 10.0) > TOLERANCE);
    }
}
