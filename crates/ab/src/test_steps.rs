//! The steps of `./ab test`, in order: one line each. A step runs `ab <args>` (this same
//! binary) or `cargo test --workspace --release`, and passes when it exits 0. A step whose
//! subcommand does not exist yet fails (clap rejects it), it is never skipped.

/// How a step runs.
pub enum Run {
    /// This binary with these arguments.
    Ab(&'static [&'static str]),
    /// `cargo test --workspace --release`; the test counts are passed through.
    CargoTest,
}

/// One step of the test suite.
pub struct Step {
    pub name: &'static str,
    pub run: Run,
}

const fn ab(name: &'static str, args: &'static [&'static str]) -> Step {
    Step {
        name,
        run: Run::Ab(args),
    }
}

/// The test suite. Add a step here.
pub const STEPS: &[Step] = &[
    ab("fetch pins", &["fetch"]),
    ab("stock build", &["build-stock"]),
    ab("build ours", &["build-ours"]),
    Step {
        name: "cargo test --workspace --release",
        run: Run::CargoTest,
    },
    ab("RUNPATH trap", &["runpath-trap"]),
    ab("swap self-check", &["swap-check"]),
    ab("scheduler differential", &["sched-diff", "--seeds", "500"]),
    ab("HRX check", &["hrx-check"]),
    ab("upstream suites", &["suites"]),
];
