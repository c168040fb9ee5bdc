//! `GGML_SCHED_TEST_FAULT`: a test-only switch that plants a known fault in the scheduler, so
//! that the sanitizer's test (`cabi-tests/sanitize`) can show the sanitizer finds it. Never
//! set it outside that test.
//!
//! Values: unset or `0`/`off`/`none`: no fault; `no-wait-before-inputless-split`: the
//! scheduler skips its wait for the previous backend before a split without inputs (the
//! upstream fix for a CPU split reusing memory a GPU still read); `wrong-pipeline-copy`: with
//! pipeline copies, each split's inputs are copied into the next copy instead of the current
//! one, so the split reads inputs of an earlier micro-batch (the upstream class of a graph
//! evaluated with another copy; `ab pipeline` must catch it). Anything else is named in
//! a warning and no fault is planted.

use std::sync::OnceLock;

/// The faults the scheduler can be told to plant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    NoWaitBeforeInputlessSplit,
    WrongPipelineCopy,
}

fn parse(text: &str) -> Result<Fault, String> {
    match text.trim() {
        "" | "0" | "off" | "none" => Ok(Fault::None),
        "no-wait-before-inputless-split" => Ok(Fault::NoWaitBeforeInputlessSplit),
        "wrong-pipeline-copy" => Ok(Fault::WrongPipelineCopy),
        _ => Err(
            "is not a test fault (none, no-wait-before-inputless-split, wrong-pipeline-copy)"
                .into(),
        ),
    }
}

/// The fault asked for, read once.
pub fn fault() -> Fault {
    static F: OnceLock<Fault> = OnceLock::new();
    *F.get_or_init(|| crate::env::read_once("GGML_SCHED_TEST_FAULT", Fault::None, "none", parse))
}

/// Whether the scheduler must skip its wait before a split without inputs (test-only).
pub fn skip_wait_before_inputless_split() -> bool {
    fault() == Fault::NoWaitBeforeInputlessSplit
}

/// The pipeline copy a split's inputs are copied into: `cur` (of `n_copies`), or the next one
/// under the `wrong-pipeline-copy` fault (test-only).
pub fn input_copy(cur: usize, n_copies: usize) -> usize {
    if fault() == Fault::WrongPipelineCopy && n_copies > 1 {
        (cur + 1) % n_copies
    } else {
        cur
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_fault_is_planted() {
        assert_eq!(parse("none"), Ok(Fault::None));
        assert_eq!(
            parse(" no-wait-before-inputless-split "),
            Ok(Fault::NoWaitBeforeInputlessSplit)
        );
        assert_eq!(parse("wrong-pipeline-copy"), Ok(Fault::WrongPipelineCopy));
        assert!(parse("no-wait").is_err());
    }
}
