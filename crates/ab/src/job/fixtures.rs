//! Reports built by hand for the tests: the README's example run, and a run where the arms
//! differ in every way the table distinguishes.

use super::catalogue::Kind;
use super::compare::compare;
use super::report::{ArmReport, Intended, Report, RunReport};
use crate::proof::{Library, Proof};

/// A proof that held, with the libraries the run's processes mapped.
pub fn proof_ok(libraries: Vec<Library>) -> Proof {
    Proof {
        ok: true,
        processes: 1,
        base_processes: 1,
        errors: vec![],
        notes: vec![],
        libraries,
    }
}

/// A mapped library.
pub fn lib(name: &str, path: &str, sha256: Option<&str>) -> Library {
    Library {
        name: name.into(),
        path: path.into(),
        sha256: sha256.map(String::from),
    }
}

/// A run that exited with `code` after `seconds`.
pub fn run(name: &str, kind: Kind, code: i32, seconds: f64, proof: Proof) -> RunReport {
    RunReport {
        name: name.into(),
        kind,
        command: vec![],
        exit_code: Some(code),
        signal: None,
        timed_out: false,
        passed: None,
        failed: None,
        not_supported: None,
        failed_tests: vec![],
        output_text: None,
        output_sha256: String::new(),
        seconds,
        proof,
        log: String::new(),
        probe_records: String::new(),
    }
}

/// A suite run with its counts.
pub fn suite(name: &str, kind: Kind, passed: u64, failed: u64, seconds: f64) -> RunReport {
    RunReport {
        passed: Some(passed),
        failed: Some(failed),
        not_supported: (kind == Kind::BackendOps).then_some(0),
        ..run(
            name,
            kind,
            if failed == 0 { 0 } else { 1 },
            seconds,
            proof_ok(vec![]),
        )
    }
}

/// A generation run that printed `text`.
pub fn generation(text: &str, seconds: f64) -> RunReport {
    RunReport {
        output_text: Some(text.into()),
        ..run(
            "llama-simple",
            Kind::Generation,
            0,
            seconds,
            proof_ok(vec![]),
        )
    }
}

/// An arm without runs whose intended file (named as resolved) is `path`.
pub fn arm(name: &str, path: &str, sha256: &str, libraries: Vec<Library>) -> ArmReport {
    ArmReport {
        name: name.into(),
        intended: Intended {
            source: path.into(),
            path: path.into(),
            sha256: sha256.into(),
        },
        swap_copy: format!("./target/ab/arms/{name}/lib/libggml-base.so.0"),
        backend: None,
        libraries,
        proof_ok: true,
        runs: vec![],
    }
}

/// A complete report of two arms, compared as the job compares them.
pub fn report(a: ArmReport, b: ArmReport) -> Report {
    let comparison = compare(&a, &b);
    Report {
        version: 1,
        complete: true,
        llama_build: "./target/llama-stock".into(),
        probe: "./target/release/libab_probe.so".into(),
        started_unix: 1_764_464_793,
        seconds: 1163.0,
        arms: vec![a, b],
        comparison,
        left_out: vec![],
    }
}

/// sha256 of the stock build's libggml-base (the README's run).
pub const STOCK_SHA: &str = "89957c70e920ec8143063bf97671c488ab681cbe8d137d4af0650d3f1ad824ab";
/// sha256 of the README's COPY: the stock file with one byte appended.
pub const MODIFIED_SHA: &str = "7464e16406b05630e64193724decf4b37796d10cf077636723d31e300981f3c7";
/// sha256 of one build of ours.
pub const OURS_SHA: &str = "34e2d76033991d701b5192f8b5ea988610218108736371e9961d2e109beefbe2";

/// The libraries every arm maps besides libggml-base: the stock build's own. The README
/// shows the first 16 hex digits of each hash; the rest are made up.
fn stock_libraries() -> Vec<Library> {
    let bin = "./target/llama-stock/bin";
    vec![
        lib(
            "libggml",
            &format!("{bin}/libggml.so.0.25.3"),
            Some("3cc524978e6a33bc0f8ab1c2de4a6d0e2f3e7d1ab3c9d1e4f07a6b5c4d3e2f10"),
        ),
        lib(
            "libggml-cpu",
            &format!("{bin}/libggml-cpu.so.0.25.3"),
            Some("965b9db953804433a1e2c3d4b5a69788f7e6d5c4b3a2918070f1e2d3c4b5a697"),
        ),
        lib(
            "libggml-rpc",
            &format!("{bin}/libggml-rpc.so.0.25.3"),
            Some("300e30cf436a0aca5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a"),
        ),
        lib(
            "libllama",
            &format!("{bin}/libllama.so.0.0.1"),
            Some("e7aee4852597ea3c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c"),
        ),
        lib(
            "libllama-common",
            &format!("{bin}/libllama-common.so.0.0.1"),
            Some("91f1b6a645228a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b"),
        ),
    ]
}

/// The libraries of an arm whose libggml-base is the swap copy with `sha256`, sorted by
/// name as the job sorts them.
fn arm_libraries(arm: &str, sha256: &str) -> Vec<Library> {
    let mut l = stock_libraries();
    l.push(lib(
        "libggml-base",
        &format!("./target/ab/arms/{arm}/lib/libggml-base.so.0"),
        Some(sha256),
    ));
    l.sort();
    l
}

/// What `llama-simple` generated in the README's run (161 bytes with the final newline).
pub const PARIS: &str = "The capital of France is Paris.\n\nThe United States has a population of \
approximately 311 million people.\n\nThe United States has a population of approximately 31\n";

/// The README's example: `./ab ab --a target/llama-stock/bin/libggml-base.so.0 --b COPY
/// --only llama-simple,ctest`, COPY being the stock file with one byte appended.
pub fn readme_report() -> Report {
    let mut a = arm(
        "a",
        "./target/llama-stock/bin/libggml-base.so.0.25.3",
        STOCK_SHA,
        arm_libraries("a", STOCK_SHA),
    );
    let mut b = arm(
        "b",
        "./target/ab/modified/libggml-base.so.0",
        MODIFIED_SHA,
        arm_libraries("b", MODIFIED_SHA),
    );
    a.runs = vec![
        generation(PARIS, 2.5),
        suite("ctest", Kind::Ctest, 50, 0, 610.0),
    ];
    b.runs = vec![
        generation(PARIS, 1.1),
        suite("ctest", Kind::Ctest, 50, 0, 543.0),
    ];
    report(a, b)
}

/// Stock against ours where the works differ in each way the table names: another text, a
/// crash after every case passed (same counts, another end), a time-out (other counts), and
/// a ctest run equal to stock's in which one process mapped stock's libggml-base instead of
/// the swap copy (the proof fails); ours's libggml-rpc could not be read.
pub fn differing_report() -> Report {
    let stock_path = "/w/target/llama-stock/bin/libggml-base.so.0.25.3";
    let mut a = arm(
        "stock",
        stock_path,
        STOCK_SHA,
        arm_libraries("stock", STOCK_SHA),
    );
    let mut b_libs = arm_libraries("ours", OURS_SHA);
    b_libs.push(lib("libggml-base", stock_path, Some(STOCK_SHA)));
    for l in b_libs.iter_mut().filter(|l| l.name == "libggml-rpc") {
        l.sha256 = None;
    }
    b_libs.sort();
    let mut b = arm(
        "ours",
        "/w/target/ours/lib/libggml-base.so.0",
        OURS_SHA,
        b_libs,
    );
    let wrong = Proof {
        ok: false,
        processes: 3,
        base_processes: 3,
        errors: vec![format!(
            "1 process(es) (test-rope) mapped libggml-base from {stock_path} (sha256 {STOCK_SHA}), \
             but the intended file is ./target/ab/arms/ours/lib/libggml-base.so.0 (copy of \
             /w/target/ours/lib/libggml-base.so.0, sha256 {OURS_SHA}): a different file: the \
             swap did not take effect"
        )],
        notes: vec![],
        libraries: vec![],
    };
    a.runs = vec![
        generation("The capital of France is Paris.\n", 2.4),
        suite("backend-ops ADD", Kind::BackendOps, 154, 0, 41.3),
        suite("backend-ops MUL_MAT", Kind::BackendOps, 1203, 0, 1604.2),
        RunReport {
            failed_tests: vec!["test-rope".into()],
            ..suite("ctest", Kind::Ctest, 48, 1, 598.7)
        },
    ];
    b.runs = vec![
        generation("The capital of France is Lyon.\n", 1.2),
        RunReport {
            exit_code: None,
            signal: Some("SIGSEGV".into()),
            ..suite("backend-ops ADD", Kind::BackendOps, 154, 0, 40.8)
        },
        RunReport {
            exit_code: None,
            signal: Some("SIGKILL".into()),
            timed_out: true,
            ..suite("backend-ops MUL_MAT", Kind::BackendOps, 911, 0, 1800.0)
        },
        RunReport {
            proof: wrong,
            failed_tests: vec!["test-rope".into()],
            ..suite("ctest", Kind::Ctest, 48, 1, 601.0)
        },
    ];
    b.proof_ok = false;
    report(a, b)
}
