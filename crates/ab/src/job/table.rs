//! The readable table of a report: the arms and what each mapped, the libraries of both
//! arms side by side, one line per work, the verdicts and the generated texts.
//!
//! Rendered into a `String` (printed by [`print_table`]) so that tests compare the exact
//! text; the README quotes it.

use super::catalogue::Kind;
use super::report::{ArmReport, Report, RunReport};
use crate::fmt_secs;
use crate::proof::{self, Library};
use std::collections::BTreeSet;
use std::fmt::Write;

impl RunReport {
    /// One-cell summary for the table.
    pub fn cell(&self) -> String {
        let mut s = match (self.passed, self.failed) {
            (Some(p), Some(f)) => format!("{p} passed, {f} failed"),
            _ => match &self.output_text {
                Some(t) => format!("{} bytes", t.len()),
                None => String::new(),
            },
        };
        let end = if self.timed_out {
            "TIMEOUT".to_string()
        } else if let Some(sig) = &self.signal {
            sig.clone()
        } else {
            format!("exit {}", self.exit_code.unwrap_or(-1))
        };
        if !s.is_empty() {
            s.push_str(", ");
        }
        s.push_str(&end);
        s.push_str(&format!(", {}", fmt_secs(self.seconds)));
        if !self.proof.ok {
            s.push_str(", PROOF FAILED");
        }
        s
    }
}

/// The first 16 hex digits of a sha256: enough to tell the libraries apart in a column.
fn short(sha: &str) -> &str {
    &sha[..sha.len().min(16)]
}

/// Prints the readable table of a report on stdout.
pub fn print_table(r: &Report) {
    print!("{}", render_table(r));
}

/// The readable table of a report, every line ending in a newline.
pub fn render_table(r: &Report) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = write_table(&mut out, r);
    out
}

fn write_table(out: &mut String, r: &Report) -> std::fmt::Result {
    write_arms(out, r)?;
    write_libraries(out, &r.arms[0], &r.arms[1])?;
    write_runs(out, r)
}

/// `== arms ==`: per arm the intended file, the libggml-base files mapped, the proof.
fn write_arms(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(out)?;
    writeln!(out, "== arms ==")?;
    for a in &r.arms {
        writeln!(
            out,
            "{:<6} intended {} sha256 {}",
            a.name, a.intended.path, a.intended.sha256
        )?;
        let bases: Vec<&Library> = a
            .libraries
            .iter()
            .filter(|l| l.name == "libggml-base")
            .collect();
        for l in bases {
            writeln!(
                out,
                "       mapped   {} sha256 {}",
                l.path,
                l.sha256.as_deref().unwrap_or("(unreadable)")
            )?;
        }
        writeln!(
            out,
            "       proof    {}",
            if a.proof_ok { "OK" } else { "FAILED" }
        )?;
    }
    Ok(())
}

/// Whether the work `name` did not end with exit 0 in either arm.
fn failed_in_both(a: &ArmReport, b: &ArmReport, name: &str) -> bool {
    let failed = |arm: &ArmReport| {
        arm.runs
            .iter()
            .find(|r| r.name == name)
            .is_some_and(|r| r.exit_code != Some(0) || r.timed_out)
    };
    failed(a) && failed(b)
}

/// Whether the work `name` of `arm` was stopped by its time limit or a signal.
fn cut_off(arm: &ArmReport, name: &str) -> bool {
    arm.runs
        .iter()
        .find(|r| r.name == name)
        .is_some_and(|r| r.timed_out || r.signal.is_some())
}

/// Whether the suite `name` counted no test in one arm or both (see [`super::compare`]).
fn no_test_ran(a: &ArmReport, b: &ArmReport, name: &str) -> bool {
    [a, b].iter().any(|arm| {
        arm.runs
            .iter()
            .find(|r| r.name == name)
            .is_some_and(|r| super::compare::tests_counted(r) == 0)
    })
}

/// An arm as the table names it: its name and the first 8 digits of its file's sha256.
fn label(a: &ArmReport) -> String {
    format!(
        "{} {}",
        a.name,
        &a.intended.sha256[..a.intended.sha256.len().min(8)]
    )
}

/// `== libraries mapped ==`: every library name either arm mapped, with the short hashes of
/// its files in each arm.
fn write_libraries(out: &mut String, a: &ArmReport, b: &ArmReport) -> std::fmt::Result {
    writeln!(out)?;
    writeln!(
        out,
        "== libraries mapped (name: {} | {}) ==",
        label(a),
        label(b)
    )?;
    let names: BTreeSet<&str> = a
        .libraries
        .iter()
        .chain(b.libraries.iter())
        .map(|l| l.name.as_str())
        .collect();
    for n in names {
        // One hash once: the same file mapped from two paths (a build run from a copy of
        // itself) is the same bytes, and listing it twice broke the columns.
        let list = |arm: &ArmReport| {
            let mut hashes: Vec<&str> = Vec::new();
            for l in arm.libraries.iter().filter(|l| l.name == n) {
                let h = short(l.sha256.as_deref().unwrap_or("?"));
                if !hashes.contains(&h) {
                    hashes.push(h);
                }
            }
            hashes.join(",")
        };
        writeln!(out, "{:<18} {:<18} | {}", n, list(a), list(b))?;
    }
    Ok(())
}

/// One line per work with both arms' cells and the verdict, then the summary line, the
/// generated texts and every failed proof.
fn write_runs(out: &mut String, r: &Report) -> std::fmt::Result {
    let (a, b) = (&r.arms[0], &r.arms[1]);
    writeln!(out)?;
    let w0 = r
        .comparison
        .runs
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let cells: Vec<(String, String)> = a
        .runs
        .iter()
        .map(|ra| {
            let rb = b.runs.iter().find(|x| x.name == ra.name);
            (ra.cell(), rb.map(RunReport::cell).unwrap_or_default())
        })
        .collect();
    let w1 = cells
        .iter()
        .map(|c| c.0.len())
        .max()
        .unwrap_or(0)
        .max(label(a).len());
    let w2 = cells
        .iter()
        .map(|c| c.1.len())
        .max()
        .unwrap_or(0)
        .max(label(b).len());
    writeln!(
        out,
        "{:<w0$}  {:<w1$}  {:<w2$}  same?",
        "work",
        label(a),
        label(b)
    )?;
    writeln!(out, "{}", "-".repeat(w0 + w1 + w2 + 12))?;
    for (c, (ca, cb)) in r.comparison.runs.iter().zip(cells.iter()) {
        let verdict = if c.equal {
            match c.outputs_equal {
                Some(true) => "yes (output equal)",
                _ => "yes",
            }
        } else if c.outputs_equal == Some(false) && failed_in_both(a, b, &c.name) {
            "NO: failed in both arms"
        } else if c.outputs_equal == Some(false) {
            "NO: output differs"
        } else if !c.same_end {
            "NO: ended differently"
        } else if cut_off(a, &c.name) {
            "NO: cut off in both arms"
        } else if !c.complete && no_test_ran(a, b, &c.name) {
            "NO: no test ran"
        } else {
            "NO: counts differ"
        };
        writeln!(out, "{:<w0$}  {ca:<w1$}  {cb:<w2$}  {verdict}", c.name)?;
    }
    writeln!(out)?;
    let c = &r.comparison;
    writeln!(
        out,
        "same file: {}; proofs: {}; outputs equal: {}; counts equal: {}",
        if c.same_file { "yes" } else { "no" },
        if c.proofs_ok { "OK" } else { "FAILED" },
        if c.runs.iter().all(|run| run.outputs_equal.is_none()) {
            // No generation ran: there was no output to compare.
            "none compared"
        } else if c.all_outputs_equal {
            "yes"
        } else {
            "NO"
        },
        if c.all_counts_equal { "yes" } else { "NO" },
    )?;
    for why in &r.left_out {
        writeln!(out, "left out: {why}")?;
    }
    for arm in [a, b] {
        if let Some(g) = arm.runs.iter().find(|r| r.kind == Kind::Generation) {
            if let Some(t) = &g.output_text {
                writeln!(out, "{} generated: {:?}", arm.name, t.trim_end())?;
            }
        }
    }
    for arm in &r.arms {
        for run in arm.runs.iter().filter(|r| !r.proof.ok) {
            writeln!(
                out,
                "[{}] {}: {}",
                arm.name,
                run.name,
                proof::summary(&run.proof)
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{differing_report, readme_report};
    use super::*;

    /// The README's example output ("What it printed here for `./ab ab --a ... --b COPY`"),
    /// preceded by the blank line the table starts with.
    const README_TABLE: &str = r#"
== arms ==
a      intended ./target/llama-stock/bin/libggml-base.so.0.25.3 sha256 89957c70e920ec8143063bf97671c488ab681cbe8d137d4af0650d3f1ad824ab
       mapped   ./target/ab/arms/a/lib/libggml-base.so.0 sha256 89957c70e920ec8143063bf97671c488ab681cbe8d137d4af0650d3f1ad824ab
       proof    OK
b      intended ./target/ab/modified/libggml-base.so.0 sha256 7464e16406b05630e64193724decf4b37796d10cf077636723d31e300981f3c7
       mapped   ./target/ab/arms/b/lib/libggml-base.so.0 sha256 7464e16406b05630e64193724decf4b37796d10cf077636723d31e300981f3c7
       proof    OK

== libraries mapped (name: a 89957c70 | b 7464e164) ==
libggml            3cc524978e6a33bc   | 3cc524978e6a33bc
libggml-base       89957c70e920ec81   | 7464e16406b05630
libggml-cpu        965b9db953804433   | 965b9db953804433
libggml-rpc        300e30cf436a0aca   | 300e30cf436a0aca
libllama           e7aee4852597ea3c   | e7aee4852597ea3c
libllama-common    91f1b6a645228a1b   | 91f1b6a645228a1b

work          a 89957c70                                b 7464e164                               same?
-------------------------------------------------------------------------------------------------------
llama-simple  161 bytes, exit 0, 2.5 s                  161 bytes, exit 0, 1.1 s                 yes (output equal)
ctest         50 passed, 0 failed, exit 0, 10 min 10 s  50 passed, 0 failed, exit 0, 9 min 03 s  yes

same file: no; proofs: OK; outputs equal: yes; counts equal: yes
a generated: "The capital of France is Paris.\n\nThe United States has a population of approximately 311 million people.\n\nThe United States has a population of approximately 31"
b generated: "The capital of France is Paris.\n\nThe United States has a population of approximately 311 million people.\n\nThe United States has a population of approximately 31"
"#;

    const DIFFERING_TABLE: &str = r#"
== arms ==
stock  intended /w/target/llama-stock/bin/libggml-base.so.0.25.3 sha256 89957c70e920ec8143063bf97671c488ab681cbe8d137d4af0650d3f1ad824ab
       mapped   ./target/ab/arms/stock/lib/libggml-base.so.0 sha256 89957c70e920ec8143063bf97671c488ab681cbe8d137d4af0650d3f1ad824ab
       proof    OK
ours   intended /w/target/ours/lib/libggml-base.so.0 sha256 34e2d76033991d701b5192f8b5ea988610218108736371e9961d2e109beefbe2
       mapped   ./target/ab/arms/ours/lib/libggml-base.so.0 sha256 34e2d76033991d701b5192f8b5ea988610218108736371e9961d2e109beefbe2
       mapped   /w/target/llama-stock/bin/libggml-base.so.0.25.3 sha256 89957c70e920ec8143063bf97671c488ab681cbe8d137d4af0650d3f1ad824ab
       proof    FAILED

== libraries mapped (name: stock 89957c70 | ours 34e2d760) ==
libggml            3cc524978e6a33bc   | 3cc524978e6a33bc
libggml-base       89957c70e920ec81   | 34e2d76033991d70,89957c70e920ec81
libggml-cpu        965b9db953804433   | 965b9db953804433
libggml-rpc        300e30cf436a0aca   | ?
libllama           e7aee4852597ea3c   | e7aee4852597ea3c
libllama-common    91f1b6a645228a1b   | 91f1b6a645228a1b

work                 stock 89957c70                              ours 34e2d760                                           same?
-------------------------------------------------------------------------------------------------------------------------------
llama-simple         32 bytes, exit 0, 2.4 s                     31 bytes, exit 0, 1.2 s                                 NO: output differs
backend-ops ADD      154 passed, 0 failed, exit 0, 41.3 s        154 passed, 0 failed, SIGSEGV, 40.8 s                   NO: ended differently
backend-ops MUL_MAT  1203 passed, 0 failed, exit 0, 26 min 44 s  911 passed, 0 failed, TIMEOUT, 30 min 00 s              NO: ended differently
ctest                48 passed, 1 failed, exit 1, 9 min 59 s     48 passed, 1 failed, exit 1, 10 min 01 s, PROOF FAILED  yes

same file: no; proofs: FAILED; outputs equal: NO; counts equal: NO
stock generated: "The capital of France is Paris."
ours generated: "The capital of France is Lyon."
[ours] ctest: PROOF FAILED:
  1 process(es) (test-rope) mapped libggml-base from /w/target/llama-stock/bin/libggml-base.so.0.25.3 (sha256 89957c70e920ec8143063bf97671c488ab681cbe8d137d4af0650d3f1ad824ab), but the intended file is ./target/ab/arms/ours/lib/libggml-base.so.0 (copy of /w/target/ours/lib/libggml-base.so.0, sha256 34e2d76033991d701b5192f8b5ea988610218108736371e9961d2e109beefbe2): a different file: the swap did not take effect
"#;

    #[test]
    fn the_readme_example_renders_exactly() {
        assert_eq!(render_table(&readme_report()), README_TABLE);
    }

    /// The README quotes the table: the quote must stay what the code prints.
    /// Without a generation work no output was compared, and the summary says so instead of
    /// "yes".
    /// One file mapped from two paths (a build run from a copy of itself: the copy's
    /// programs load the original's libraries too) is one hash in its cell; two different
    /// files stay two.
    #[test]
    fn a_library_mapped_from_two_paths_with_the_same_bytes_is_listed_once() {
        let mut r = readme_report();
        let cpu = r.arms[0]
            .libraries
            .iter()
            .find(|l| l.name == "libggml-cpu")
            .unwrap()
            .clone();
        let mut elsewhere = cpu.clone();
        elsewhere.path = "/elsewhere/bin/libggml-cpu.so.0".into();
        r.arms[0].libraries.push(elsewhere);
        let mut other = cpu;
        other.path = "/other/bin/libggml-cpu.so.0".into();
        other.sha256 = Some("ab".repeat(32));
        r.arms[1].libraries.push(other);
        let t = render_table(&r);
        assert!(
            t.contains(
                "libggml-cpu        965b9db953804433   | 965b9db953804433,abababababababab\n"
            ),
            "{t}"
        );
    }

    #[test]
    fn no_generation_means_no_output_compared() {
        let mut r = readme_report();
        for arm in &mut r.arms {
            arm.runs.retain(|run| run.kind != Kind::Generation);
        }
        r.comparison = super::super::compare::compare(&r.arms[0], &r.arms[1]);
        let text = render_table(&r);
        assert!(
            text.contains("outputs equal: none compared; counts equal: yes"),
            "{text}"
        );
        assert!(render_table(&readme_report()).contains("outputs equal: yes;"));
    }

    #[test]
    fn a_work_left_out_is_named_under_the_summary() {
        let mut r = readme_report();
        r.left_out = vec!["ctest: /b has no tests (configured without LLAMA_BUILD_TESTS?)".into()];
        let t = render_table(&r);
        let summary = t.find("same file: no;").unwrap();
        let note = t
            .find("\nleft out: ctest: /b has no tests (configured without LLAMA_BUILD_TESTS?)\n")
            .unwrap();
        assert!(note > summary, "{t}");
    }

    #[test]
    fn the_readme_quotes_this_table() {
        let readme = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"),
        )
        .unwrap();
        let start = readme
            .find("```\n== arms ==\n")
            .expect("README.md quotes the table in a ``` block")
            + 4;
        let len = readme[start..].find("```").unwrap();
        // The block omits the blank line the table starts with.
        assert_eq!(&readme[start..start + len], &README_TABLE[1..]);
    }

    #[test]
    fn differences_and_a_failed_proof_render_exactly() {
        assert_eq!(render_table(&differing_report()), DIFFERING_TABLE);
    }

    #[test]
    fn cells_name_how_each_run_ended() {
        let r = differing_report();
        let cells: Vec<String> = r.arms[1].runs.iter().map(RunReport::cell).collect();
        assert_eq!(
            cells,
            [
                "31 bytes, exit 0, 1.2 s",
                "154 passed, 0 failed, SIGSEGV, 40.8 s",
                "911 passed, 0 failed, TIMEOUT, 30 min 00 s",
                "48 passed, 1 failed, exit 1, 10 min 01 s, PROOF FAILED",
            ]
        );
    }
}
