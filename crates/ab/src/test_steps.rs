//! The steps of `./ab test`, in order: one line each. A step runs `ab <args>` (this same
//! binary) or `cargo test --workspace --release`, and passes when it exits 0. A step whose
//! subcommand does not exist yet fails (clap rejects it), it is never skipped.

/// How a step runs.
pub enum Run {
    /// This binary with these arguments.
    Ab(&'static [&'static str]),
    /// `cargo test --workspace --release`; the test counts are passed through.
    CargoTest,
    /// `cargo` with these arguments (lint steps).
    Cargo(&'static [&'static str]),
    /// A script of the repository (path relative to the root) with these arguments.
    Script(&'static str, &'static [&'static str]),
}

/// What a step compares between two runs, and how, so that it holds on any processor.
///
/// ggml's CPU kernels differ by CPU feature (AVX2, AVX-512, NEON, ...), so results of
/// floating-point work are never compared with a fixed value, and two runs are compared
/// exactly only when they take the same numeric path on the same machine (the same
/// kernels, attention algorithm, weight layout and thread count); otherwise with a stated
/// tolerance. `ab test` prints this line at the start of every step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compares {
    /// No floating-point result is compared (builds, lints, placements, exact data movement).
    Exact(&'static str),
    /// Floating-point results of two runs on this CPU, on the same numeric path, compared
    /// exactly (what the path is).
    SamePath(&'static str),
    /// Floating-point results of two runs whose paths may differ, compared with this
    /// tolerance.
    Tolerance(&'static str),
}

impl Compares {
    /// Whether the step's outcome can depend on the CPU's features.
    pub fn depends_on_cpu(self) -> bool {
        !matches!(self, Compares::Exact(_))
    }

    /// The line printed before the step runs.
    pub fn describe(self) -> String {
        match self {
            Compares::Exact(what) => format!("compares: {what}; no floating-point result"),
            Compares::SamePath(what) => format!(
                "compares exactly, on one numeric path: {what}; the values depend on this \
                 CPU's features, both runs use the same CPU"
            ),
            Compares::Tolerance(what) => format!(
                "compares with a tolerance: {what}; the values depend on this CPU's features"
            ),
        }
    }
}

/// One step of the test suite.
pub struct Step {
    pub name: &'static str,
    pub run: Run,
    /// What it compares, and how.
    pub compares: Compares,
}

const fn script(
    name: &'static str,
    path: &'static str,
    args: &'static [&'static str],
    compares: Compares,
) -> Step {
    Step {
        name,
        run: Run::Script(path, args),
        compares,
    }
}

/// Our library as installed by `ab build-ours`, for steps that swap it in by folder.
const OURS_DIR: &str = "target/ours/lib";
const OURS: &str = "target/ours/lib/libggml-base.so.0";
const HRX_CHECK: &str = "crates/hrx/scripts/check.sh";

/// The CI subset of the main job: every default work but the three slowest
/// test-backend-ops ops (MUL_MAT, MUL_MAT_ID, FLASH_ATTN_EXT: about 30 minutes an arm on 2
/// cores), which `./ab` runs in full, and ctest's `python` label ([`CTEST_CI_LEFT_OUT`]).
const SUITES_CI: &str = "llama-simple,ctest,backend-ops SET_ROWS,backend-ops FILL,\
backend-ops CPY,backend-ops SET,backend-ops GET_ROWS,backend-ops ADD,backend-ops SOFT_MAX,\
backend-ops RMS_NORM,backend-ops ROPE";

/// The ctest label the CI subset leaves out: test-jinja-py, llama.cpp's chat-template engine
/// against Python's jinja2 (76 s an arm of ctest's 148 on 2 cores),
/// which makes no ggml call; `./ab` runs it.
const CTEST_CI_LEFT_OUT: &str = "python";

const fn ab(name: &'static str, args: &'static [&'static str], compares: Compares) -> Step {
    Step {
        name,
        run: Run::Ab(args),
        compares,
    }
}

use Compares::{Exact, SamePath, Tolerance};

const BUILD: Compares = Exact("nothing (a build step)");
const LINT: Compares = Exact("nothing (a lint)");
const HRX_OPS: Compares =
    Tolerance("each HRX0 op against the CPU backend, by test-backend-ops' own per-op NMSE bound");
const HRX_SMOLLM2: Compares = SamePath(
    "greedy text of HRX0 runs against a CPU-only run, all with -fa off --no-repack -t 2 \
     (the simulator runs ggml's CPU kernels)",
);
const HRX_LOGITS: Compares = SamePath(
    "per-position logits of SmolLM2 on HRX0 against a CPU-only run (cabi-tests/logits/\
     logits_nmse.c: a 43-token prompt batch, then 16 single-token decodes, teacher-forced; \
     flash attention off, -t 2 --no-repack): NMSE exactly 0 and the same argmax at every position; one \
     token changed in the HRX0 run at position 50 must exit 1 with that position over the bound of \
     1e-4; --dev CPU (the reference itself) is refused; --ref-model, the CPU run from SmolLM2 \
     dequantized to F32 (another numeric path, so a stated tolerance): every position above 0 \
     and under 0.1, and a reference file that does not load is refused by name",
);
const ARCHS: Compares = Tolerance(
    "each architecture's logits against a CPU-only model, NMSE <= 1e-4 (upstream's bound: \
     the device may run another attention algorithm), and a saved and reloaded model's \
     logits equal to the original's exactly (same device, same path)",
);
const SUITES: Compares = SamePath(
    "text and pass/fail counts, stock arm against ours: the same programs and libggml-cpu, \
     only libggml-base differs",
);

/// The test suite. Add a step here (one line each: rustfmt keeps its hands off the table).
#[rustfmt::skip]
pub const STEPS: &[Step] = &[
    ab("fetch pins", &["fetch"], Exact("sha256 of every fetched file against pins.toml")),
    ab("stock build", &["build-stock"], BUILD),
    ab("build ours", &["build-ours"], BUILD),
    Step {
        name: "cargo test --workspace --release",
        run: Run::CargoTest,
        compares: Exact("unit, property and parity tests: placements, layouts, bytes moved"),
    },
    Step {
        name: "cargo fmt --check",
        run: Run::Cargo(&["fmt", "--all", "--", "--check"]),
        compares: LINT,
    },
    Step {
        name: "cargo clippy -D warnings",
        run: Run::Cargo(&["clippy", "--workspace", "--all-targets", "--release", "--", "-D", "warnings"]),
        compares: LINT,
    },
    ab("RUNPATH trap", &["runpath-trap"], Exact("which library file each process mapped")),
    ab("swap self-check", &["swap-check"], Exact("which library file each process mapped")),
    ab("scheduler differential", &["sched-diff", "--seeds", "2000"], Exact("placements, splits, copies, buffer sizes, every tensor's buffer and offset (ours with GGML_ALLOC_LAYOUT=stock); the test backends compute nothing")),
    ab("scheduler differential, packed layout", &["sched-diff", "--seeds", "2000", "--b-layout", "packed"], Exact("placements, splits and copies as in the step above; ours with its default packed allocation layout: offsets may differ, no compute buffer larger than stock's")),
    script("HRX C API and SIGSEGV, stock base", HRX_CHECK, &["cabi"], Exact("bytes uploaded and read back")),
    script("HRX C API and SIGSEGV, our base", HRX_CHECK, &["cabi", OURS_DIR], Exact("bytes uploaded and read back")),
    script("bad input, both bases", "cabi-tests/bad-input/all.sh", &[], Exact("each misuse's outcome (exit status or signal, a message naming what was wrong, output unchanged) in the stock arm and in ours, against the tables of cabi-tests/bad-input/{run,gguf,env}.sh")),
    script("sanitizer planted faults, our base (stock: no sanitizer)", "cabi-tests/sanitize/run.sh", &[OURS_DIR], Exact("each planted ordering fault's report text (hazard, tensors, buffer type, actors, split and node, the ordering op), level 1 aborting through ggml_abort, and no report with the fault off; ours only, as stock has no sanitizer to check")),
    script("queued input copies, writes used without a copy, and view inputs, both bases", "cabi-tests/sched-waits/run.sh", &[OURS_DIR], Exact("each run's count of wrong values (a test device whose queue runs only at synchronize, 3 tokens without one), serial and with pipeline copies, the queued copy first and last among the split's inputs: ours 0 in every run; stock 0 serial with the copy first and 16 in the other three, its gap kept as measured; the device writing host storage a CPU split reads without a copy, writing in place into the CPU's compute buffer at bytes a later CPU node gets, an optimizer step writing a moment the CPU reads, and (serial) its queued copy of a weight into a compute buffer shared with the CPU landing at bytes a later CPU node gets: ours 0, stock 24, 48, 24 and 12; ours' sanitizer: no report with its own waits, 2 naming the queued copy and 3, 9, 6 or 12 naming the unordered writes with stock's waits where they lose the race; a tensor a queued device wrote in place, read by a third device through a copy of it, of a view of it, or of a view of a pre-allocated root assigned to the CPU: 0 in both arms, ours with either waits; a view placed apart from a root beside its reader: stock 24 (copied before the root is computed), ours 0, ours with the in-place rule off 24, its sanitizer reporting the stale copy; a copy read again by a later split after its source was written in place: stock 24 (the first fill reused), ours 0, rule off 24")),
    script("a plan not reused where it is wrong for the graph, both bases", "cabi-tests/plan-reuse/run.sh", &[OURS_DIR], Exact("each case's outcome with the real ggml-cpu on one thread, the second graph after the first graph's plan (same structure and counts, every tensor fitting): an in-place reuse over a source that now broadcasts, stock 9 wrong values; a leaf no node reads that grew, stock's range check aborts; ours 0 wrong values in both (it plans again); stock's outcomes are its gaps, kept as measured")),
    script("backend layer over a logging test device, stock vs ours", "cabi-tests/layer/run.sh", &[OURS_DIR], SamePath("the transcripts of cabi-tests/layer/{layer,edge}.c in both arms, line for line: every call the layer makes into a logging test device (offsets, sizes, bytes, order), tensor access, copies, multi-buffers, graph copies and comparisons (the CPU computes the same graph in both arms), devices and events")),
    script("scheduler compute side on a computing test device, stock vs ours", "cabi-tests/compute-diff/run.sh", &[OURS_DIR], SamePath("108 configurations of cabi-tests/compute-diff: every backend call on a test device that computes through ggml-cpu, every eval-callback ask and observe, every value; with stock's waits, layout and placement identical, with ours' defaults identical but for the waits and buffer sizes docs/sched.md names")),
    script("fusion-safe layout, every architecture, stock vs ours", "cabi-tests/sched-bench/fusion_archs.sh", &[OURS_DIR], Exact("for every test-llama-archs model's prompt and token graphs on HRX0, every run of up to 5 consecutive nodes whose fusion ggml-cuda's memory check would refuse: none in ours that stock allows, the same graphs in both arms; the control, ours packed with GGML_ALLOC_REUSE_DELAY=0, must find some")),
    script("HRX CUDA kernels compile (NVRTC from PyPI, no GPU)", "crates/hrx/scripts/check-kernels.sh", &[], Exact("NVRTC's verdict on the CUDA runtime's kernel source, in both half-conversion variants; nothing runs")),
    script("HRX test-backend-ops -b HRX0, stock base", HRX_CHECK, &["backend-ops"], HRX_OPS),
    script("HRX test-backend-ops -b HRX0, our base", HRX_CHECK, &["backend-ops", OURS_DIR], HRX_OPS),
    script("HRX SmolLM2 on HRX0 + arena, stock base", HRX_CHECK, &["smollm2"], HRX_SMOLLM2),
    script("HRX SmolLM2 on HRX0 + arena, our base", HRX_CHECK, &["smollm2", OURS_DIR], HRX_SMOLLM2),
    script("HRX logits NMSE on HRX0, stock base", HRX_CHECK, &["logits"], HRX_LOGITS),
    script("HRX logits NMSE on HRX0, our base", HRX_CHECK, &["logits", OURS_DIR], HRX_LOGITS),
    script("HRX test-llama-archs -b HRX0, our base", HRX_CHECK, &["archs", OURS_DIR], ARCHS),
    ab("test-llama-archs (CPU), our base", &["exec", "--lib", OURS, "--", "test-llama-archs"], ARCHS),
    ab("upstream suites, stock vs ours", &["ab", "--only", SUITES_CI, "--ctest-exclude-label", CTEST_CI_LEFT_OUT], SUITES),
    ab("ggml-rpc, stock and ours", &["rpc"], SamePath("greedy text of llama-completion with 8 layers on RPC0 (ggml-rpc-server on 127.0.0.1) and the rest on the CPU: stock server and client against ours and ours, and stock server with our client; the same programs and kernels, only libggml-base differs")),
    ab("pipeline parallelism by perplexity, stock and ours", &["pipeline", "--self-test"], Tolerance("llama-perplexity of SmolLM2 over 3 chunks of the pinned tree's docs/build.md, -c 2048 -b 2048 -ub 512: each arm split over HRX0/HRX1 with pipeline parallelism against itself on HRX0, and ours against stock, within 0.1 %; then 32 greedy tokens of llama-completion, the split's text equal to HRX0's in each arm and ours equal to stock's (simulated devices: the same CPU kernels everywhere); a planted wrong-pipeline-copy fault in ours must land outside the bound and change the text")),
    ab("a split with partial offload and small micro-batches, stock and ours", &["pipeline", "--ctx", "192", "--ubatch", "48", "--ngl", "15", "--chunks", "2", "--no-pipeline"], Tolerance("llama-perplexity of SmolLM2 over 2 chunks of the pinned tree's docs/build.md, -c 192 -b 192 -ub 48 -ngl 15 (the first 15 layers on the CPU, no pipeline parallelism): each arm split over HRX0/HRX1 against itself on HRX0, and ours against stock, within 0.1 %, and 32 greedy tokens' text equal; four micro-batches a chunk put a graph input's next values in host memory while the devices may still read the last ones (HRX before the fix: 10.64 against 8.91)")),
    ab("pipeline parallelism over ggml-rpc, stock and ours", &["pipeline", "--one", "HRX0", "--two", "RPC0,HRX0", "--chunks", "1", "--self-test"], Tolerance("llama-perplexity of SmolLM2 over 1 chunk, -c 2048 -b 2048 -ub 512, split between RPC0 (a ggml-rpc-server of the same arm on 127.0.0.1, proven like the client, serving a simulated HRX0 of its own) and HRX0 with pipeline parallelism, against HRX0 alone, in each arm, and ours against stock, within 0.1 %, and the 32 greedy tokens' text equal in every run; the planted wrong-pipeline-copy fault in ours must land outside the bound and change the text")),
    ab("in-place reproducer, three arms", &["repro"], Exact("FILL and SET_ROWS results against values written by the host (no rounding)")),
    ab("in-place property, 2000 seeds, ours", &["repro", "prop", "--seeds", "2000"], Tolerance("outputs through the scheduler over [HRX0, CPU] against the CPU alone, NMSE <= 1e-6")),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags the SmolLM2 step's description names are the ones its script passes.
    #[test]
    fn smollm2_description_names_the_scripts_numeric_path() {
        let script = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../crates/hrx/scripts/check.sh"),
        )
        .unwrap();
        let path = script
            .lines()
            .find_map(|l| l.strip_prefix("SMOLLM2_PATH=("))
            .and_then(|l| l.strip_suffix(')'))
            .expect("check.sh defines SMOLLM2_PATH=(...)");
        let SamePath(what) = HRX_SMOLLM2 else {
            panic!("the SmolLM2 step compares text exactly, on one path");
        };
        assert!(what.contains(path), "{what:?} does not name {path:?}");
        assert_eq!(path, "-fa off --no-repack -t 2");
    }

    /// The logits step's description names the position check.sh perturbs and the flags of
    /// its numeric path.
    #[test]
    fn logits_description_names_the_scripts_perturbed_position() {
        let script = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../crates/hrx/scripts/check.sh"),
        )
        .unwrap();
        let pos = script
            .lines()
            .find_map(|l| l.strip_prefix("LOGITS_PERTURB="))
            .expect("check.sh defines LOGITS_PERTURB=...");
        let args = script
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("local args=(-m \"$model\" --dev HRX0 ")
            })
            .and_then(|l| l.strip_suffix(')'))
            .expect("check.sh's run_logits defines its arguments");
        let SamePath(what) = HRX_LOGITS else {
            panic!("the logits step compares exactly, on one path");
        };
        assert!(
            what.contains(&format!("position {pos} ")),
            "{what:?} does not name {pos}"
        );
        assert!(what.contains(args), "{what:?} does not name {args:?}");
        assert_eq!(args, "-t 2 --no-repack");
    }

    #[test]
    fn floating_point_steps_say_they_depend_on_the_cpu() {
        for step in STEPS {
            let d = step.compares.describe();
            assert_eq!(
                step.compares.depends_on_cpu(),
                d.contains("depend on this CPU's features"),
                "{}: {d}",
                step.name
            );
        }
        let cpu_steps: Vec<&str> = STEPS
            .iter()
            .filter(|s| s.compares.depends_on_cpu())
            .map(|s| s.name)
            .collect();
        assert!(cpu_steps.contains(&"HRX SmolLM2 on HRX0 + arena, stock base"));
        assert!(cpu_steps.contains(&"HRX logits NMSE on HRX0, our base"));
        assert!(cpu_steps.contains(&"upstream suites, stock vs ours"));
        assert!(!cpu_steps.contains(&"scheduler differential"));
    }
}
