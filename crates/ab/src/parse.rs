//! Reading the results out of the upstream tools' console output.

/// Removes ANSI colour sequences (`ESC [ ... m`), which test-backend-ops prints around
/// `OK`/`FAIL`.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Counts from one run of a test suite.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub passed: u64,
    pub failed: u64,
    /// Cases the backend does not support (test-backend-ops only).
    pub not_supported: u64,
    /// Names of the failing cases, with their status where the tool gives one.
    pub failed_names: Vec<String>,
    /// True when the tool's own summary line was found (false: counted from case lines, the
    /// run probably ended early).
    pub summary_seen: bool,
}

/// One case line of test-backend-ops: `  OP(params): OK|FAIL|not supported [..]`.
pub enum CaseLine {
    Ok,
    Fail(String),
    NotSupported,
}

/// Classifies a test-backend-ops line (ANSI already stripped).
pub fn backend_ops_case(line: &str) -> Option<CaseLine> {
    let l = line.trim_end();
    if !l.starts_with("  ") || l.starts_with("  Backend ") {
        return None;
    }
    let body = l.trim_start();
    let paren = body.find('(')?;
    let colon = body.rfind("): ")?;
    if colon < paren {
        return None;
    }
    let verdict = body[colon + 3..].trim();
    if verdict.starts_with("not supported") {
        Some(CaseLine::NotSupported)
    } else if verdict == "OK" {
        Some(CaseLine::Ok)
    } else if verdict.ends_with("FAIL") {
        Some(CaseLine::Fail(body[..colon + 1].to_string()))
    } else {
        None
    }
}

/// Parses test-backend-ops console output: the `  N/M tests passed` summary of each tested
/// backend, or (when the run ended early) the case lines.
pub fn backend_ops(stdout: &str) -> Counts {
    let mut c = Counts::default();
    let (mut line_ok, mut line_fail) = (0u64, 0u64);
    let (mut sum_pass, mut sum_total) = (0u64, 0u64);
    // The "Failing tests:" block at the end of a backend's run: one indented name a line.
    // Preferred over case lines, which parallel workers (`-j`) may interleave.
    let mut listed: Vec<String> = Vec::new();
    let mut in_list = false;
    for raw in stdout.lines() {
        let line = strip_ansi(raw);
        if line.trim() == "Failing tests:" {
            in_list = true;
            continue;
        }
        if in_list {
            if line.starts_with("  ") && !line.trim().is_empty() && !line.starts_with("  Backend ")
            {
                listed.push(line.trim().to_string());
                continue;
            }
            in_list = false;
        }
        if let Some(rest) = line.trim().strip_suffix(" tests passed") {
            if let Some((p, t)) = rest.split_once('/') {
                if let (Ok(p), Ok(t)) = (p.trim().parse::<u64>(), t.trim().parse::<u64>()) {
                    sum_pass += p;
                    sum_total += t;
                    c.summary_seen = true;
                    continue;
                }
            }
        }
        match backend_ops_case(&line) {
            Some(CaseLine::Ok) => line_ok += 1,
            Some(CaseLine::Fail(name)) => {
                line_fail += 1;
                if c.failed_names.len() < 200 {
                    c.failed_names.push(name);
                }
            }
            Some(CaseLine::NotSupported) => c.not_supported += 1,
            None => {}
        }
    }
    if !listed.is_empty() {
        c.failed_names = listed;
    }
    // With `-j` the cases finish in any order.
    c.failed_names.sort();
    if c.summary_seen {
        c.passed = sum_pass;
        c.failed = sum_total.saturating_sub(sum_pass);
    } else {
        c.passed = line_ok;
        c.failed = line_fail;
    }
    c
}

/// One ctest result line: `  3/49 Test  #3: name ......   Passed    0.02 sec`.
pub fn ctest_result(line: &str) -> Option<(u64, u64, String, String)> {
    let l = line.trim();
    let (frac, rest) = l.split_once(" Test")?;
    let (n, total) = frac.split_once('/')?;
    let n: u64 = n.trim().parse().ok()?;
    let total: u64 = total.trim().parse().ok()?;
    let rest = rest.trim_start();
    let rest = rest.strip_prefix('#')?;
    let (_, rest) = rest.split_once(": ")?;
    let name_end = rest.find(' ')?;
    let name = rest[..name_end].to_string();
    let after = rest[name_end..].trim_start_matches([' ', '.']);
    // "Passed    0.02 sec" / "***Exception: SegFault  0.10 sec": the time follows two spaces.
    let status = after
        .rsplit_once("  ")
        .map(|(s, _)| s.trim())
        .unwrap_or(after)
        .trim_start_matches('*')
        .to_string();
    Some((n, total, name, status))
}

/// Parses ctest output: the `N% tests passed, M tests failed out of T` summary and the list
/// under `The following tests FAILED:`; without a summary, the result lines are counted.
pub fn ctest(stdout: &str) -> Counts {
    let mut c = Counts::default();
    let (mut ok, mut bad) = (0u64, 0u64);
    let mut bad_names = Vec::new();
    let mut in_failed_list = false;
    let mut listed = Vec::new();
    for line in stdout.lines() {
        let t = line.trim();
        if let Some((_, rest)) = t.split_once("% tests passed, ") {
            // "M tests failed out of T"
            let mut it = rest.split_whitespace();
            let failed = it.next().and_then(|x| x.parse::<u64>().ok());
            let total = rest
                .rsplit_once("out of ")
                .and_then(|(_, x)| x.trim().parse::<u64>().ok());
            if let (Some(f), Some(tot)) = (failed, total) {
                c.failed = f;
                c.passed = tot.saturating_sub(f);
                c.summary_seen = true;
            }
            continue;
        }
        if t.starts_with("The following tests FAILED") {
            in_failed_list = true;
            continue;
        }
        if in_failed_list {
            // "3 - test-foo (Failed)"
            if let Some((num, rest)) = t.split_once(" - ") {
                if num.trim().parse::<u64>().is_ok() {
                    listed.push(rest.trim().to_string());
                    continue;
                }
            }
            in_failed_list = false;
        }
        if let Some((_, _, name, status)) = ctest_result(line) {
            if status == "Passed" {
                ok += 1;
            } else {
                bad += 1;
                bad_names.push(format!("{name} ({status})"));
            }
        }
    }
    if !c.summary_seen {
        c.passed = ok;
        c.failed = bad;
    }
    c.failed_names = if listed.is_empty() { bad_names } else { listed };
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    const BACKEND_OPS: &str = "Testing 1 devices\n\nBackend 1/1: CPU\n  Device description: x\n\n  ADD(type=f32,ne=[1,1,1,1]): \u{1b}[1;32mOK\u{1b}[0m\n  ADD(type=f16,ne=[2,1,1,1]): \u{1b}[1;31mFAIL\u{1b}[0m\n  ADD(type=q4_0,ne=[1,1,1,1]): not supported [CPU] \n  2/3 tests passed\n\nFailing tests:\n  ADD(type=f16,ne=[2,1,1,1])\n  Backend CPU: \u{1b}[1;31mFAIL\u{1b}[0m\n1/1 backends passed\n\u{1b}[1;32mOK\u{1b}[0m\n";

    #[test]
    fn backend_ops_summary() {
        let c = backend_ops(BACKEND_OPS);
        assert!(c.summary_seen);
        assert_eq!((c.passed, c.failed, c.not_supported), (2, 1, 1));
        assert_eq!(
            c.failed_names,
            vec!["ADD(type=f16,ne=[2,1,1,1])".to_string()]
        );
    }

    #[test]
    fn backend_ops_cut_short() {
        let cut = BACKEND_OPS.split("  2/3").next().unwrap();
        let c = backend_ops(cut);
        assert!(!c.summary_seen);
        assert_eq!((c.passed, c.failed), (1, 1));
    }

    const CTEST: &str = "Test project /b\n      Start  1: test-a\n 1/3 Test  #1: test-a ...........................   Passed    0.02 sec\n      Start  2: test-b\n 2/3 Test  #2: test-b ...........................***Exception: SegFault  0.10 sec\n 3/3 Test  #3: test-c ...........................***Failed    1.00 sec\n\n33% tests passed, 2 tests failed out of 3\n\nLabel Time Summary:\nmain    =   1.12 sec*proc (3 tests)\n\nTotal Test time (real) =   1.15 sec\n\nThe following tests FAILED:\n\t  2 - test-b (SEGFAULT)\n\t  3 - test-c (Failed)\nErrors while running CTest\n";

    #[test]
    fn ctest_summary_and_failures() {
        let c = ctest(CTEST);
        assert!(c.summary_seen);
        assert_eq!((c.passed, c.failed), (1, 2));
        assert_eq!(
            c.failed_names,
            vec![
                "test-b (SEGFAULT)".to_string(),
                "test-c (Failed)".to_string()
            ]
        );
    }

    #[test]
    fn ctest_lines() {
        let (n, t, name, status) = ctest_result(
            " 2/3 Test  #2: test-b ...........................***Exception: SegFault  0.10 sec",
        )
        .unwrap();
        assert_eq!((n, t, name.as_str()), (2, 3, "test-b"));
        assert_eq!(status, "Exception: SegFault");
        let (_, _, _, status) =
            ctest_result(" 1/3 Test  #1: test-a ...........................   Passed    0.02 sec")
                .unwrap();
        assert_eq!(status, "Passed");
        let cut = CTEST.split("\n\n33%").next().unwrap();
        let c = ctest(cut);
        assert!(!c.summary_seen);
        assert_eq!((c.passed, c.failed), (1, 2));
    }
}
