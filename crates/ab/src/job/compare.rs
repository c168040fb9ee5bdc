//! Compares the runs of two arms, work by work: the `comparison` section of the report.

use super::catalogue::Kind;
use super::report::{ArmReport, Comparison, RunComparison};

/// Compares the runs of two arms, work by work.
pub fn compare(a: &ArmReport, b: &ArmReport) -> Comparison {
    let mut runs = Vec::new();
    for ra in &a.runs {
        let Some(rb) = b.runs.iter().find(|r| r.name == ra.name) else {
            continue;
        };
        let same_end =
            ra.exit_code == rb.exit_code && ra.signal == rb.signal && ra.timed_out == rb.timed_out;
        // A generation that did not end well in both arms compared nothing: empty texts are
        // equal, and that must not read as a pass.
        let generated = |r: &super::report::RunReport| r.exit_code == Some(0) && !r.timed_out;
        // Likewise a suite in which an arm ran no test (a filter that matched nothing, a build
        // without tests): zero counts are equal and compare nothing.
        let ran = |r: &super::report::RunReport| tests_counted(r) > 0;
        // And a suite cut off by its time limit or a signal counted part of its tests: equal
        // counts of two cut-off runs (test-backend-ops buffers its piped output, so both arms
        // stop at the same count) say nothing about the rest.
        let finished = |r: &super::report::RunReport| !r.timed_out && r.signal.is_none();
        let (outputs_equal, counts_equal) = match ra.kind {
            Kind::Generation => (
                Some(ra.output_text == rb.output_text && generated(ra) && generated(rb)),
                None,
            ),
            _ => (
                None,
                Some(
                    ra.passed == rb.passed
                        && ra.failed == rb.failed
                        && ra.not_supported == rb.not_supported
                        && ra.failed_tests == rb.failed_tests,
                ),
            ),
        };
        let complete = match ra.kind {
            Kind::Generation => true,
            _ => ran(ra) && ran(rb) && finished(ra) && finished(rb),
        };
        runs.push(RunComparison {
            name: ra.name.clone(),
            same_end,
            outputs_equal,
            counts_equal,
            complete,
            equal: same_end
                && complete
                && outputs_equal.unwrap_or(true)
                && counts_equal.unwrap_or(true),
        });
    }
    let all_outputs_equal = runs.iter().all(|r| r.outputs_equal.unwrap_or(true));
    let all_counts_equal = runs.iter().all(|r| r.counts_equal.unwrap_or(true));
    Comparison {
        same_file: a.intended.sha256 == b.intended.sha256,
        proofs_ok: a.proof_ok && b.proof_ok,
        all_equal: runs.iter().all(|r| r.equal),
        all_outputs_equal,
        all_counts_equal,
        runs,
    }
}

/// The tests or cases a suite run counted: passed, failed and (test-backend-ops) not
/// supported; 0 when its output held no counts.
pub fn tests_counted(r: &super::report::RunReport) -> u64 {
    r.passed.unwrap_or(0) + r.failed.unwrap_or(0) + r.not_supported.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{
        arm, differing_report, generation, proof_ok, readme_report, run, suite, STOCK_SHA,
    };
    use super::*;

    #[test]
    fn equal_arms_compare_equal() {
        let mk = || {
            vec![
                generation("Paris", 1.0),
                suite("ctest", Kind::Ctest, 49, 0, 1.0),
            ]
        };
        let mut a = arm("a", "x", STOCK_SHA, vec![]);
        let mut b = arm("b", "x", STOCK_SHA, vec![]);
        a.runs = mk();
        b.runs = mk();
        let c = compare(&a, &b);
        assert!(c.same_file && c.proofs_ok);
        assert!(c.all_equal && c.all_outputs_equal && c.all_counts_equal);
        assert_eq!(c.runs.len(), 2);
        assert_eq!(c.runs[0].outputs_equal, Some(true));
        assert_eq!(c.runs[0].counts_equal, None);
        assert_eq!(c.runs[1].outputs_equal, None);
        assert_eq!(c.runs[1].counts_equal, Some(true));
    }

    #[test]
    fn the_readme_run_differs_only_in_the_file() {
        let c = readme_report().comparison;
        assert!(!c.same_file);
        assert!(c.proofs_ok && c.all_equal);
    }

    #[test]
    fn differences_are_named() {
        let c = differing_report().comparison;
        assert!(!c.same_file && !c.proofs_ok && !c.all_equal);
        assert!(!c.all_outputs_equal && !c.all_counts_equal);
        let names: Vec<&str> = c.runs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "llama-simple",
                "backend-ops ADD",
                "backend-ops MUL_MAT",
                "ctest"
            ]
        );
        // Another text, same end.
        assert_eq!(c.runs[0].outputs_equal, Some(false));
        assert!(c.runs[0].same_end);
        // A crash after the same counts, and a time-out with fewer: both end differently,
        // and neither is complete (a run cut off counted part of its suite).
        assert!(!c.runs[1].same_end && !c.runs[2].same_end);
        assert!(!c.runs[1].complete && !c.runs[2].complete);
        assert_eq!(c.runs[1].counts_equal, Some(true));
        assert_eq!(c.runs[2].counts_equal, Some(false));
        assert!(!c.runs[1].equal && !c.runs[2].equal);
        // Same counts and names, same end: equal, although its proof failed; the proof
        // is judged on its own (`proofs_ok`).
        assert!(c.runs[3].equal);
    }

    #[test]
    fn a_generation_that_failed_in_both_arms_is_not_equal() {
        let mut a = arm("a", "x", STOCK_SHA, vec![]);
        let mut b = arm("b", "x", STOCK_SHA, vec![]);
        let mut failed = generation("", 0.1);
        failed.exit_code = Some(1);
        a.runs = vec![failed.clone()];
        b.runs = vec![failed];
        let c = compare(&a, &b);
        assert!(c.runs[0].same_end);
        assert_eq!(c.runs[0].outputs_equal, Some(false));
        assert!(!c.all_equal);
    }

    #[test]
    fn a_work_one_arm_has_not_run_is_left_out() {
        let mut a = arm("a", "x", STOCK_SHA, vec![]);
        let mut b = arm("b", "x", STOCK_SHA, vec![]);
        a.runs = vec![
            suite("ctest", Kind::Ctest, 49, 0, 1.0),
            generation("Paris", 1.0),
        ];
        b.runs = vec![suite("ctest", Kind::Ctest, 49, 0, 1.0)];
        let c = compare(&a, &b);
        assert_eq!(c.runs.len(), 1);
        assert_eq!(c.runs[0].name, "ctest");
        assert!(c.all_equal);
    }

    #[test]
    fn a_suite_that_ran_no_test_is_not_equal() {
        let mut a = arm("a", "x", STOCK_SHA, vec![]);
        let mut b = arm("b", "x", STOCK_SHA, vec![]);
        // Counts of zero in both arms (a filter that matched nothing) and no counts at all
        // (the output held no summary): the same end, and nothing compared.
        a.runs = vec![
            suite("backend-ops NOPE", Kind::BackendOps, 0, 0, 0.1),
            run("ctest", Kind::Ctest, 0, 0.1, proof_ok(vec![])),
        ];
        b.runs = a.runs.clone();
        let c = compare(&a, &b);
        assert!(c.runs.iter().all(|r| r.same_end));
        assert!(c.runs.iter().all(|r| r.counts_equal == Some(true)));
        assert!(c.runs.iter().all(|r| !r.complete && !r.equal));
        assert!(!c.all_equal && c.all_counts_equal);
        // One case that is not supported is a test that ran: both arms agree on it.
        let mut ns = suite("backend-ops X", Kind::BackendOps, 0, 0, 0.1);
        ns.not_supported = Some(1);
        a.runs = vec![ns.clone()];
        b.runs = vec![ns];
        assert!(compare(&a, &b).all_equal);
    }

    #[test]
    fn a_suite_cut_off_in_both_arms_is_not_equal() {
        let mut a = arm("a", "x", STOCK_SHA, vec![]);
        let mut b = arm("b", "x", STOCK_SHA, vec![]);
        // Both arms stopped by the time limit at the same count, then both by one signal.
        let mut timed = suite("backend-ops ADD", Kind::BackendOps, 106, 0, 2.0);
        timed.timed_out = true;
        let mut killed = suite("backend-ops MUL", Kind::BackendOps, 50, 0, 2.0);
        killed.signal = Some("SIGSEGV".into());
        killed.exit_code = None;
        a.runs = vec![timed, killed];
        b.runs = a.runs.clone();
        let c = compare(&a, &b);
        assert!(c.runs.iter().all(|r| r.same_end));
        assert!(c
            .runs
            .iter()
            .all(|r| r.counts_equal == Some(true) && !r.complete && !r.equal));
        assert!(!c.all_equal);
    }
}
