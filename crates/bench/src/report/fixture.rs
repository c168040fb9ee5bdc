//! A hand-built [`Report`] with realistic figures for the snapshot tests of the markdown: two
//! measured graph configurations and one that failed, real-graph and end-to-end runs, one
//! end-to-end test whose B arm never ran, and every kind of error line the report prints.

use super::{BufferRow, E2eProbe, E2eRow, Report, SchedRow};
use crate::archs::ArchsRun;
use crate::archs_cycle::{CycleConfig, ModelRun};
use crate::arms::{Arm, Machine};
use crate::e2e;
use crate::probe::{Counter, ProbeStats};
use crate::sched::{Callgrind, Config, Heap, HeapWindow, Section};
use crate::stats::{paired_ratios, signed_rank_p, Summary};
use std::path::{Path, PathBuf};

fn arm(key: &'static str, label: &str, source: &str, sha256: &str) -> Arm {
    Arm {
        key,
        label: label.into(),
        source: PathBuf::from(source),
        dir: PathBuf::from(format!("/work/target/bench/arms/{}", key.to_lowercase())),
        file: PathBuf::from(format!(
            "/work/target/bench/arms/{}/libggml-base.so.0",
            key.to_lowercase()
        )),
        sha256: sha256.into(),
    }
}

fn window(allocs: i64, bytes: i64, peak: i64) -> HeapWindow {
    HeapWindow {
        allocs,
        frees: allocs - 1,
        bytes,
        peak,
        net: bytes / 8,
    }
}

fn heap(scale: i64) -> Heap {
    Heap {
        sched_new: window(12 * scale, 2_310_144 * scale, 2_310_144 * scale),
        first_alloc: window(40 * scale, 917_504 * scale, 655_360 * scale),
        split_graph: window(0, 0, 0),
        cycle: window(3 * scale, 768 * scale, 512 * scale),
        reserve: window(9 * scale, 81_920 * scale, 65_536 * scale),
    }
}

fn callgrind(ir_per_cycle: u64, section: Section) -> Callgrind {
    let what = match section {
        Section::Cycle => "cycle",
        Section::Reserve => "reserve",
    };
    Callgrind {
        ir_per_cycle,
        iters: if section == Section::Cycle { 5 } else { 2 },
        out_file: PathBuf::from(format!("/work/target/bench/callgrind/smollm2-2.{what}.out")),
        top: vec![
            format!(
                "{} (45.1%)  ggml_backend_sched_split_graph",
                ir_per_cycle * 2
            ),
            format!("{} (20.3%)  ggml_gallocr_alloc_graph", ir_per_cycle),
        ],
        top_inclusive: vec![format!(
            "{} (100.0%)  ggml_backend_sched_alloc_graph",
            ir_per_cycle * 5
        )],
    }
}

fn sched_ok(graph: &str, backends: u32, nodes: u32, cycle: [&[f64]; 2]) -> SchedRow {
    let split: [Vec<f64>; 2] = [
        cycle[0].iter().map(|x| x * 0.6).collect(),
        cycle[1].iter().map(|x| x * 0.5).collect(),
    ];
    let reserve: [Vec<f64>; 2] = [
        cycle[0].iter().map(|x| x * 3.0).collect(),
        cycle[1].iter().map(|x| x * 2.5).collect(),
    ];
    let first_alloc: [Vec<f64>; 2] = [
        reserve[0].iter().map(|x| x * 0.8).collect(),
        reserve[1].iter().map(|x| x * 0.8).collect(),
    ];
    SchedRow {
        config: Config {
            graph: graph.into(),
            backends,
        },
        error: None,
        nodes,
        leafs: nodes / 3,
        splits: [2 * backends - 1, 2 * backends - 1],
        cycle_runs: [cycle[0].to_vec(), cycle[1].to_vec()],
        cycle: [Summary::of(cycle[0]), Summary::of(cycle[1])],
        cycle_paired: Summary::of(&paired_ratios(cycle[0], cycle[1])),
        split: [Summary::of(&split[0]), Summary::of(&split[1])],
        split_runs: split,
        reserve: [Summary::of(&reserve[0]), Summary::of(&reserve[1])],
        reserve_runs: reserve,
        // The fixture's first alloc_graph: 0.8 of each arm's reserve.
        first_alloc: [Summary::of(&first_alloc[0]), Summary::of(&first_alloc[1])],
        first_alloc_runs: first_alloc,
        buffers: vec![
            BufferRow {
                backend: "FAKE0".into(),
                a: 12_582_912,
                b: 12_582_912,
            },
            BufferRow {
                backend: "FCPU".into(),
                a: 1_048_576,
                b: 1_040_384,
            },
        ],
        heap: [Some(heap(2)), Some(heap(1))],
        callgrind: [None, None],
        callgrind_reserve: [None, None],
    }
}

fn probe(alloc_calls: i64, alloc_ns: i64, reserve_ns: i64) -> ProbeStats {
    ProbeStats {
        lib: "/work/target/bench/arms/a/libggml-base.so.0".into(),
        alloc_graph: Counter {
            calls: alloc_calls,
            ns: alloc_ns,
            nodes: alloc_calls * 700,
        },
        reserve: Counter {
            calls: 3,
            ns: reserve_ns,
            nodes: 2100,
        },
        reset: Counter {
            calls: alloc_calls,
            ns: alloc_ns / 20,
            nodes: 0,
        },
        compute: Counter::default(),
        synchronize: Counter::default(),
    }
}

fn archs_run(wall_s: f64, passed: bool, alloc_ns: i64, reserve_ns: i64) -> ArchsRun {
    ArchsRun {
        wall_s,
        passed,
        summary: Some("Summary: 41/41 architectures passed".into()),
        probe: probe(164, alloc_ns, reserve_ns),
    }
}

fn model_run(model: &str, nodes: i64, ns: i64) -> ModelRun {
    ModelRun {
        model: model.into(),
        ok: true,
        error: None,
        backends: 2,
        nodes,
        splits: 3,
        placement_hash: 0x9e37_79b9,
        buffer_bytes: [4_194_304, 524_288, 0, 0],
        calls: 16,
        ns,
        reset_calls: 16,
        reset_ns: ns / 10,
    }
}

/// `m` with other compute buffer sizes (bytes per backend, first 4 backends).
fn with_buffers(m: ModelRun, buffer_bytes: [i64; 4]) -> ModelRun {
    ModelRun { buffer_bytes, ..m }
}

pub fn e2e_row(device: &str, test: &str, a: &[f64], b: &[f64]) -> E2eRow {
    E2eRow {
        device: device.into(),
        test: test.into(),
        samples: [a.to_vec(), b.to_vec()],
        ts: [Summary::of(a), Summary::of(b)],
        paired: Summary::of(&paired_ratios(a, b)),
        paired_p: signed_rank_p(&paired_ratios(a, b)),
    }
}

/// The report the snapshot tests render.
pub fn report() -> Report {
    let mut smollm2 = sched_ok(
        "smollm2",
        2,
        1_004,
        [
            &[41_234.0, 40_987.0, 42_011.0],
            &[15_321.0, 15_876.0, 15_102.0],
        ],
    );
    smollm2.callgrind = [
        Some(callgrind(412_345, Section::Cycle)),
        Some(callgrind(151_234, Section::Cycle)),
    ];
    smollm2.callgrind_reserve = [
        Some(callgrind(1_203_456, Section::Reserve)),
        Some(callgrind(598_012, Section::Reserve)),
    ];
    let mut deepseek = sched_ok(
        "deepseek",
        3,
        3_512,
        [
            &[250_100.0, 248_900.0, 251_700.0],
            &[140_200.0, 139_800.0, 162_000.0],
        ],
    );
    // callgrind of arm B failed: its cells and ratios print as dashes.
    deepseek.callgrind = [Some(callgrind(2_912_000, Section::Cycle)), None];
    deepseek.splits = [5, 6];
    let failed = SchedRow {
        error: Some("sched-bench arm B: exit status 3 | mmap of 99 bytes failed\nstderr: …".into()),
        ..SchedRow::empty(Config {
            graph: "smollm2".into(),
            backends: 3,
        })
    };
    Report {
        command: "bench --rounds 3 --iters 200".into(),
        started_utc: "2025-01-01T09:00:00Z".into(),
        finished_utc: "2025-01-01T09:41:07Z".into(),
        wall_seconds: 2467.4,
        machine: Machine {
            cpu: "AMD EPYC 7B13".into(),
            cores: 2,
            kernel: "Linux 6.8.0-1015-gcp".into(),
            mem_gib: 7.77,
        },
        loadavg_start: 1.25,
        loadavg_end: 2.5,
        arms: [
            arm(
                "A",
                "stock",
                "target/llama-stock/bin/libggml-base.so.0",
                "5f1c0ffee0000000000000000000000000000000000000000000000000000a11",
            ),
            arm(
                "B",
                "ours",
                "target/ours/lib/libggml-base.so.0",
                "0b0e000000000000000000000000000000000000000000000000000000000b22",
            ),
        ],
        rounds: 3,
        iters: 200,
        e2e_rounds: 4,
        e2e_reps: 5,
        sched: vec![smollm2, deepseek, failed],
        archs_rounds: 2,
        archs_filter: Some("llama".into()),
        archs: [
            vec![
                archs_run(61.2, true, 812_000_000, 95_000_000),
                archs_run(63.9, true, 830_500_000, 97_250_000),
            ],
            vec![
                archs_run(58.0, true, 402_000_000, 51_000_000),
                archs_run(59.4, false, 410_000_000, 49_500_000),
            ],
        ],
        archs_error: Some("round 2: test-llama-archs arm B\nexit status 1".into()),
        hrx: Some((
            "/work/target/release/libggml-hrx.so".into(),
            "4a7e000000000000000000000000000000000000000000000000000000000c33".into(),
        )),
        cycle_rounds: 2,
        cycle_models: 2,
        cycle: vec![CycleConfig {
            devices: "HRX0".into(),
            runs: [
                vec![
                    vec![
                        model_run("llama-dense.gguf", 740, 3_200_000),
                        model_run("qwen3moe.gguf", 1_130, 5_600_000),
                    ],
                    vec![
                        model_run("llama-dense.gguf", 740, 3_280_000),
                        model_run("qwen3moe.gguf", 1_130, 5_500_000),
                    ],
                ],
                // B's buffers: llama-dense smaller (0.778 of A's), qwen3moe larger on its
                // second backend (1.028 of A's, the model the report must name); the total
                // 0.903, just over the goal.
                vec![
                    vec![
                        with_buffers(
                            model_run("llama-dense.gguf", 740, 1_500_000),
                            [3_145_728, 524_288, 0, 0],
                        ),
                        with_buffers(
                            model_run("qwen3moe.gguf", 1_130, 2_400_000),
                            [4_194_304, 655_360, 0, 0],
                        ),
                    ],
                    vec![
                        with_buffers(
                            model_run("llama-dense.gguf", 740, 1_560_000),
                            [3_145_728, 524_288, 0, 0],
                        ),
                        with_buffers(
                            model_run("qwen3moe.gguf", 1_130, 2_450_000),
                            [4_194_304, 655_360, 0, 0],
                        ),
                    ],
                ],
            ],
            errors: vec!["round 1 arm B: timeout after 600 s".into()],
        }],
        cycle_error: None,
        e2e: vec![
            e2e_row(
                "CPU",
                "pp512",
                &[210.5, 212.0, 208.9, 211.4],
                &[214.2, 213.8, 209.9, 215.0],
            ),
            e2e_row(
                "CPU",
                "tg128",
                &[80.1, 79.5, 81.0, 80.4],
                &[82.3, 81.9, 80.8, 82.6],
            ),
            e2e_row(
                "CPU",
                crate::e2e::REUSE_OFF_TEST,
                &[76.0, 75.2, 77.1, 76.4],
                &[79.9, 79.0, 80.2, 79.5],
            ),
            e2e_row("HRX0", "tg128", &[55.5, 56.1], &[]),
        ],
        e2e_probe: vec![
            E2eProbe {
                device: "CPU".into(),
                reuse_off: false,
                runs: [
                    vec![
                        probe(645, 41_280_000, 2_700_000),
                        probe(645, 42_570_000, 2_610_000),
                    ],
                    vec![
                        probe(645, 16_125_000, 1_230_000),
                        probe(645, 16_770_000, 1_290_000),
                    ],
                ],
            },
            E2eProbe {
                device: "CPU".into(),
                reuse_off: true,
                runs: [
                    vec![
                        probe(258, 20_640_000, 2_700_000),
                        probe(258, 21_930_000, 2_610_000),
                    ],
                    vec![
                        probe(258, 3_096_000, 1_230_000),
                        probe(258, 3_225_000, 1_290_000),
                    ],
                ],
            },
            E2eProbe {
                device: "HRX0".into(),
                reuse_off: false,
                runs: [vec![probe(645, 51_600_000, 3_300_000)], vec![]],
            },
        ],
        e2e_errors: vec![
            "HRX0 arm B: llama-bench exited with status 1\nfailed to load model".into(),
        ],
        e2e_devices: vec![
            e2e::Device {
                name: "CPU".into(),
                backend_path: None,
            },
            e2e::Device {
                name: "HRX0".into(),
                backend_path: Some(PathBuf::from("/work/target/release/libggml-hrx.so")),
            },
        ],
    }
}

/// Compares `actual` with the committed snapshot `src/report/snapshots/<name>.md`, byte for
/// byte. With `UPDATE_SNAPSHOTS=1` it writes the snapshot instead (review the diff before
/// committing it: a snapshot is only as good as the reading it got).
pub fn assert_snapshot(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/report/snapshots")
        .join(format!("{name}.md"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_SNAPSHOTS=1 writes it)", path.display()));
    assert!(
        expected == actual,
        "{name} differs from {}:\n--- expected\n{expected}\n--- actual\n{actual}",
        path.display()
    );
}
