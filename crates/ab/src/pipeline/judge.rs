//! The verdict of `ab pipeline`: each arm's split against its one-device run, and the arms
//! against each other, for each measure (perplexity within [`TOLERANCE`], greedy text equal).

use super::runner::{Measure, RunResult, Value};
use crate::say;

/// The largest relative difference between two perplexity estimates that still counts as
/// equal (0.1 %, issue 18's bound). On simulated devices the kernels are the CPU's in every
/// configuration, so the estimates are in fact equal to the last printed digit.
pub const TOLERANCE: f64 = 1e-3;

/// |a - b| / b, the relative difference of `a` from the reference `b`.
pub fn relative(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

/// The byte offset of the first character where `a` and `b` differ (the shorter one's length
/// when one is the other's beginning); `None` when they are equal.
pub fn first_difference(a: &str, b: &str) -> Option<usize> {
    if a == b {
        return None;
    }
    let common = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map(|((i, _), _)| i);
    Some(common.unwrap_or(a.len().min(b.len())))
}

/// Up to 40 characters of `s` from byte offset `at` (a character boundary), for a message.
fn excerpt(s: &str, at: usize) -> String {
    s[at.min(s.len())..].chars().take(40).collect()
}

/// Compares `a` (the run judged) with `reference`: whether they agree (perplexities within
/// [`TOLERANCE`], texts equal) and what was compared, for a message. Runs without their value
/// do not agree.
pub fn compare(a: &RunResult, reference: &RunResult) -> (bool, String) {
    match (&a.value, &reference.value) {
        (Some(Value::Ppl(p)), Some(Value::Ppl(r))) => {
            let (p, r) = (*p, *r);
            let d = relative(p, r);
            let within = d <= TOLERANCE;
            let verdict = if within {
                "(within 0.1 %)"
            } else {
                "OVER 0.1 %"
            };
            (
                within,
                format!("{p:.4} against {r:.4}: {:.4} % {verdict}", d * 100.0),
            )
        }
        (Some(Value::Text(t)), Some(Value::Text(r))) => match first_difference(t, r) {
            None => (true, format!("greedy text equal ({} bytes)", t.len())),
            Some(at) => (
                false,
                format!(
                    "greedy text DIFFERS from byte {at}: {:?} against {:?}",
                    excerpt(t, at),
                    excerpt(r, at)
                ),
            ),
        },
        _ => (false, "no value to compare".into()),
    }
}

/// [`compare`], printed as one line that starts with `what`.
fn agree(what: &str, a: &RunResult, reference: &RunResult) -> bool {
    let (same, how) = compare(a, reference);
    say(&format!("pipeline: {what}: {how}"));
    same
}

/// Prints each comparison of the runs of one measure; true when every check holds: every run
/// ok, the one-device runs with one scheduler copy, the split runs with pipeline parallelism
/// when `want_pipeline`, each arm's split agreeing with its one-device run, and ours agreeing
/// with stock on each configuration.
pub fn judge(
    results: &[RunResult],
    measure: Measure,
    arms: [&str; 2],
    one: &str,
    two: &str,
    want_pipeline: bool,
) -> bool {
    let get = |k: usize, d: &str| {
        results
            .iter()
            .find(|r| r.arm == k && r.devices == d && r.measure == measure)
    };
    let mut pass = results
        .iter()
        .filter(|r| r.measure == measure)
        .all(|r| r.ok);
    for (k, arm) in arms.into_iter().enumerate() {
        let (Some(a), Some(b)) = (get(k, one), get(k, two)) else {
            pass = false;
            continue;
        };
        if a.ok && a.copies != Some(1) {
            say(&format!(
                "pipeline: {}: the run on {one} had {} scheduler copies, not 1: it is not the \
                 one-device reference",
                arm,
                a.copies
                    .map_or("an unknown number of".into(), |c| c.to_string())
            ));
            pass = false;
        }
        if want_pipeline && b.ok && !b.pipeline {
            say(&format!(
                "pipeline: {}: the run on {two} did not say \"pipeline parallelism enabled\" \
                 with more than one scheduler copy (last: {}): the split did not exercise the \
                 pipeline copies",
                arm,
                b.copies.map_or("none logged".into(), |c| c.to_string())
            ));
            pass = false;
        }
        if a.ok && b.ok {
            pass &= agree(&format!("{arm}: {two} against {one}"), b, a);
        }
    }
    for d in [one, two] {
        if let (Some(a), Some(b)) = (get(0, d), get(1, d)) {
            if a.ok && b.ok {
                let what = format!("on {d}: {} against {}", arms[1], arms[0]);
                pass &= agree(&what, b, a);
            }
        }
    }
    pass
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tolerance_is_relative_to_the_reference() {
        assert!(relative(9.0672, 9.0672) == 0.0);
        // 0.1 % of 10 is 0.01.
        assert!(relative(10.009, 10.0) <= TOLERANCE);
        assert!(relative(10.011, 10.0) > TOLERANCE);
        assert!(relative(9.989, 10.0) > TOLERANCE);
    }

    #[test]
    fn texts_differ_where_their_first_character_does() {
        assert_eq!(first_difference("Paris is", "Paris is"), None);
        assert_eq!(first_difference("Paris is big", "Paris is old"), Some(9));
        assert_eq!(first_difference("Paris", "Paris, France"), Some(5));
        assert_eq!(first_difference("Paris, France", "Paris"), Some(5));
        // Multi-byte characters: the offset stays on a character boundary.
        let (a, b) = ("Zürich é", "Zürich e");
        let at = first_difference(a, b).unwrap();
        assert_eq!(at, "Zürich ".len());
        assert_eq!(excerpt(a, at), "é");
    }

    fn run(arm: usize, devices: &str, text: &str, copies: u32) -> RunResult {
        RunResult {
            arm,
            devices: devices.into(),
            measure: Measure::Greedy(8),
            value: Some(Value::Text(text.into())),
            pipeline: copies > 1,
            copies: Some(copies),
            ok: true,
        }
    }

    #[test]
    fn a_split_text_must_equal_the_one_device_text_in_both_arms() {
        let arms = ["stock", "ours"];
        let g = Measure::Greedy(8);
        let good = [
            run(0, "HRX0", "Paris.", 1),
            run(1, "HRX0", "Paris.", 1),
            run(1, "HRX0,HRX1", "Paris.", 4),
            run(0, "HRX0,HRX1", "Paris.", 4),
        ];
        assert!(judge(&good, g, arms, "HRX0", "HRX0,HRX1", true));
        // Ours split differs from ours alone (and from stock split).
        let mut bad = good;
        bad[2].value = Some(Value::Text("Paris!".into()));
        assert!(!judge(&bad, g, arms, "HRX0", "HRX0,HRX1", true));
        // A split run without pipeline copies tests nothing.
        let mut flat = [
            run(0, "HRX0", "Paris.", 1),
            run(1, "HRX0", "Paris.", 1),
            run(1, "HRX0,HRX1", "Paris.", 1),
            run(0, "HRX0,HRX1", "Paris.", 4),
        ];
        assert!(!judge(&flat, g, arms, "HRX0", "HRX0,HRX1", true));
        // ... unless the check asked for a split alone (a partial offload)
        assert!(judge(&flat, g, arms, "HRX0", "HRX0,HRX1", false));
        flat[2].copies = Some(4);
        flat[2].pipeline = true;
        assert!(judge(&flat, g, arms, "HRX0", "HRX0,HRX1", true));
        // A missing run fails; perplexity runs are not judged with the texts.
        assert!(!judge(&flat[..3], g, arms, "HRX0", "HRX0,HRX1", true));
        assert!(!judge(
            &flat,
            Measure::Perplexity,
            arms,
            "HRX0",
            "HRX0,HRX1",
            true
        ));
    }
}
