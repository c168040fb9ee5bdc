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

/// One step of the test suite.
pub struct Step {
    pub name: &'static str,
    pub run: Run,
}

const fn script(name: &'static str, path: &'static str, args: &'static [&'static str]) -> Step {
    Step {
        name,
        run: Run::Script(path, args),
    }
}

/// Our library as installed by `ab build-ours`, for steps that swap it in by folder.
const OURS_DIR: &str = "target/ours/lib";
const OURS: &str = "target/ours/lib/libggml-base.so.0";
const HRX_CHECK: &str = "crates/hrx/scripts/check.sh";

/// The CI subset of the main job: every default work but the three slowest
/// test-backend-ops ops (MUL_MAT, MUL_MAT_ID, FLASH_ATTN_EXT: about 30 minutes an arm on 2
/// cores), which `./ab` runs in full.
const SUITES_CI: &str = "llama-simple,ctest,backend-ops SET_ROWS,backend-ops FILL,\
backend-ops CPY,backend-ops SET,backend-ops GET_ROWS,backend-ops ADD,backend-ops SOFT_MAX,\
backend-ops RMS_NORM,backend-ops ROPE";

const fn ab(name: &'static str, args: &'static [&'static str]) -> Step {
    Step {
        name,
        run: Run::Ab(args),
    }
}

/// The test suite. Add a step here (one line each: rustfmt keeps its hands off the table).
#[rustfmt::skip]
pub const STEPS: &[Step] = &[
    ab("fetch pins", &["fetch"]),
    ab("stock build", &["build-stock"]),
    ab("build ours", &["build-ours"]),
    Step {
        name: "cargo test --workspace --release",
        run: Run::CargoTest,
    },
    Step {
        name: "cargo fmt --check",
        run: Run::Cargo(&["fmt", "--all", "--", "--check"]),
    },
    Step {
        name: "cargo clippy -D warnings",
        run: Run::Cargo(&["clippy", "--workspace", "--all-targets", "--release", "--", "-D", "warnings"]),
    },
    ab("RUNPATH trap", &["runpath-trap"]),
    ab("swap self-check", &["swap-check"]),
    ab("scheduler differential", &["sched-diff", "--seeds", "2000"]),
    script("HRX C API and SIGSEGV, stock base", HRX_CHECK, &["cabi"]),
    script("HRX C API and SIGSEGV, our base", HRX_CHECK, &["cabi", OURS_DIR]),
    script("HRX test-backend-ops -b HRX0, stock base", HRX_CHECK, &["backend-ops"]),
    script("HRX test-backend-ops -b HRX0, our base", HRX_CHECK, &["backend-ops", OURS_DIR]),
    script("HRX SmolLM2 on HRX0 + arena, stock base", HRX_CHECK, &["smollm2"]),
    script("HRX SmolLM2 on HRX0 + arena, our base", HRX_CHECK, &["smollm2", OURS_DIR]),
    script("HRX test-llama-archs -b HRX0, our base", HRX_CHECK, &["archs", OURS_DIR]),
    ab("test-llama-archs (CPU), our base", &["exec", "--lib", OURS, "--", "test-llama-archs"]),
    ab("upstream suites, stock vs ours", &["ab", "--only", SUITES_CI]),
    ab("in-place reproducer, three arms", &["repro"]),
    ab("in-place property, 2000 seeds, ours", &["repro", "prop", "--seeds", "2000"]),
];
