//! `ab swap-check`: a self-test of the swap and the proof on a real stock program.
//!
//! Runs `test-backend-ops test -b CPU -o ADD` of the llama build twice: with the build's own
//! `libggml-base` and with a modified copy (one byte appended, so another sha256). Each run
//! must pass, and its proof must show the arm's copy mapped with the arm's hash; the records
//! of the second run checked against the first arm must fail (the check tells them apart).

use crate::paths::{self, Paths};
use crate::proof;
use crate::swap::{self, Arm, Job};
use crate::{proc, say};
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::time::Duration;

/// Runs the self-test; returns 0 when every check holds, else 1.
pub fn swap_check(paths: &Paths, llama_build: Option<PathBuf>) -> Result<u8> {
    let build = crate::default_build(paths, llama_build)?;
    let probe = crate::ensure_probe(paths)?;
    let stock_lib = paths::bin_dir(&build)
        .join("libggml-base.so.0")
        .canonicalize()
        .context("the llama build has no libggml-base.so.0")?;
    let other = paths.ab_dir().join("swap-check").join("libggml-base.so.0");
    std::fs::create_dir_all(other.parent().unwrap_or(&paths.target))?;
    let mut bytes = std::fs::read(&stock_lib)?;
    bytes.push(0);
    std::fs::write(&other, &bytes)?;
    let program = paths::program(&build, "test-backend-ops")?;
    let (mut passed, mut failed) = (0u32, 0u32);
    let mut check = |ok: bool, what: String| {
        if ok {
            passed += 1;
            say(&format!("  PASS  {what}"));
        } else {
            failed += 1;
            say(&format!("  FAIL  {what}"));
        }
    };
    let mut arms = Vec::new();
    let mut records = Vec::new();
    for (name, file) in [("check-stock", &stock_lib), ("check-other", &other)] {
        let arm = Arm::prepare(&paths.ab_dir(), name, file, None)?;
        let o = swap::run(
            &paths.ab_dir(),
            &probe,
            &arm,
            &Job {
                name: "test-backend-ops-ADD",
                program: program.clone(),
                args: ["test", "-b", "CPU", "-o", "ADD"]
                    .iter()
                    .map(Into::into)
                    .collect(),
                timeout: Duration::from_secs(600),
                echo: false,
                expect_base: true,
                dir: None,
            },
            &mut proc::Quiet,
        )?;
        let counts = crate::parse::backend_ops(&String::from_utf8_lossy(&o.finished.stdout));
        check(
            o.finished.success() && counts.passed > 0 && counts.failed == 0,
            format!(
                "[{name}] test-backend-ops -o ADD: {}, {} passed, {} failed",
                o.finished.ended(),
                counts.passed,
                counts.failed
            ),
        );
        check(o.proof.ok, format!("[{name}] {}", proof::summary(&o.proof)));
        let base: Vec<_> = o
            .proof
            .libraries
            .iter()
            .filter(|l| l.name == "libggml-base")
            .collect();
        check(
            base.len() == 1
                && base[0].path == arm.lib_copy.display().to_string()
                && base[0].sha256.as_deref() == Some(arm.sha256.as_str()),
            format!(
                "[{name}] mapped libggml-base is {} with sha256 {}",
                arm.lib_copy.display(),
                arm.sha256
            ),
        );
        let others = ["libggml", "libggml-cpu"];
        check(
            others
                .iter()
                .all(|n| o.proof.libraries.iter().any(|l| l.name == *n)),
            format!("[{name}] libggml and libggml-cpu are recorded too"),
        );
        records.push(proof::read_records(&o.probe_file)?);
        arms.push(arm);
    }
    check(
        arms[0].sha256 != arms[1].sha256,
        "the two arms' files differ in sha256".into(),
    );
    let crossed = proof::check(&records[1], &arms[0], true);
    check(
        !crossed.ok,
        "the second run's records fail against the first arm (the check tells files apart)".into(),
    );
    say(&format!(
        "swap-check: {passed} checks passed, {failed} failed"
    ));
    Ok(if failed == 0 { 0 } else { 1 })
}
