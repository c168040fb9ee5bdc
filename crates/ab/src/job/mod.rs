//! `ab ab`, the main job: the same work in two arms, a proof per run, `target/ab/report.json`
//! and a readable table.
//!
//! Work (default): `llama-simple` greedy 32 tokens on the pinned model or `--model` (output
//! compared byte for byte; at `-ngl` 99, `--partial-ngl` and 0 on a build with a device
//! besides the CPU), `test-backend-ops test -b DEV -o OP` for each device of the build and
//! each op of [`catalogue::DEFAULT_OPS`] (`--full`: every op in one run), and the build's
//! ctest suite without the model-labelled and network tests.
//!
//! One module per job:
//! - [`catalogue`]: the work list (programs, arguments, time limits, `--only`);
//! - [`report`]: the types of `report.json`, its contract, and writing it;
//! - [`compare`]: the `comparison` section, work by work;
//! - [`run`]: the orchestration (arms, each work in each arm with its proof);
//! - [`table`]: the readable table.

pub(crate) mod catalogue;
mod compare;
#[cfg(test)]
mod fixtures;
mod report;
mod run;
mod table;

pub use catalogue::{ctest_label, devices, PROMPT};
pub use run::{lock, run, AbOptions};
