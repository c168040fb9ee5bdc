//! Rendering the report as markdown: one function per section, each appending its heading,
//! explanation and table to the document, in the order [`Report::markdown`] calls them. The
//! cell helpers below fix how a figure prints (µs with one decimal, ratios with three, "–"
//! for a figure that is missing).

use super::{ir_ratio, Report, GOAL_OVERHEAD, GOAL_TOKENS};
use crate::buffers::{Ratios, Sized, GOAL_MODEL, GOAL_TOTAL};
use crate::sched::Callgrind;
use crate::stats::{below_one_lines, p_suffix, BelowOne, Summary};
use std::fmt::Write as _;

/// Median over processes of `f`, `None` when there are none.
fn median_of<T>(runs: &[T], f: impl Fn(&T) -> f64) -> Option<Summary> {
    Summary::of(&runs.iter().map(f).collect::<Vec<_>>())
}

/// median(b) / median(a), `None` when either is missing or a's median is 0.
fn ratio_of(a: &Option<Summary>, b: &Option<Summary>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if a.median > 0.0 => Some(b.median / a.median),
        _ => None,
    }
}

/// ns as µs, one decimal.
fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1000.0)
}

/// "median [min–max]" in µs, "–" for no sample.
fn spread_us(s: &Option<Summary>) -> String {
    match s {
        Some(s) => format!("{} [{}–{}]", us(s.median), us(s.min), us(s.max)),
        None => "–".into(),
    }
}

/// A ratio with three decimals, "–" when there is none.
fn ratio_cell(r: Option<f64>) -> String {
    r.map_or("–".into(), |r| format!("{r:.3}"))
}

/// A paired ratio as "median [p25–p75]", "–" for no sample.
fn paired_cell(s: &Option<Summary>) -> String {
    match s {
        Some(s) => format!("{:.3} [{:.3}–{:.3}]", s.median, s.p25, s.p75),
        None => "–".into(),
    }
}

/// Whether a goal is met; "–" when there is nothing to judge.
fn goal_cell(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "met",
        Some(false) => "**not met**",
        None => "–",
    }
}

/// Bytes as MiB (two decimals) from 1 MiB up, else KiB (one decimal).
fn mib(bytes: i64) -> String {
    if bytes.abs() >= 1 << 20 {
        format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

impl Report {
    /// The report as markdown: machine and command, then one table per measurement, the
    /// goals beside the figures.
    pub fn markdown(&self) -> String {
        let mut s = String::new();

        self.header(&mut s);
        self.sched_overhead(&mut s);
        self.sched_reserve(&mut s);
        self.instructions(&mut s);
        self.buffers(&mut s);
        self.heap(&mut s);
        self.archs(&mut s);
        self.archs_cycle(&mut s);
        self.e2e_tokens(&mut s);
        self.e2e_probe(&mut s);
        self.e2e_notes(&mut s);
        self.noise(&mut s);
        self.callgrind_top(&mut s);
        s
    }

    /// The title and the run's facts: command, machine, load, both arms' files (and the HRX library), and a note when both arms are one file.
    fn header(&self, s: &mut String) {
        let [a, b] = &self.arms;
        let _ = writeln!(
            s,
            "## Benchmark: libggml-base arm B ({}) against arm A ({})\n",
            b.label, a.label
        );
        let _ = writeln!(s, "- Command: `{}`", self.command);
        let _ = writeln!(
            s,
            "- Machine: {}, {} cores, {:.1} GiB, {}",
            self.machine.cpu, self.machine.cores, self.machine.mem_gib, self.machine.kernel
        );
        let _ = writeln!(
            s,
            "- Run: {} to {} ({:.0} s); load average {:.2} at start, {:.2} at end (shared machine)",
            self.started_utc,
            self.finished_utc,
            self.wall_seconds,
            self.loadavg_start,
            self.loadavg_end
        );
        for arm in &self.arms {
            let _ = writeln!(
                s,
                "- Arm {} ({}): `{}` sha256 `{}`",
                arm.key,
                arm.label,
                arm.source.display(),
                &arm.sha256
            );
        }
        if let Some((path, sha)) = &self.hrx {
            let _ = writeln!(
                s,
                "- HRX device library (both arms, real graphs and HRX0 rows): `{path}` sha256 `{sha}`"
            );
        }
        if a.sha256 == b.sha256 {
            let _ = writeln!(
                s,
                "- Note: both arms are the same file (a noise baseline: ratios should be 1.00)."
            );
        }
    }

    /// Table 1: the scheduler's cycle time per graph configuration, µs, with the goal (a failed configuration gets one row that says why).
    fn sched_overhead(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "\n### Scheduler overhead (per graph: reset + split_graph + alloc_graph + dispatch to no-op backends)\n"
        );
        let _ = writeln!(
            s,
            "{} rounds, one process per arm per round (A B, then B A), {} timed iterations per process; \
             each cell is the median over processes of the per-process median, [min–max] over processes, µs.\n",
            self.rounds, self.iters
        );
        let _ = writeln!(
            s,
            "| graph | backends | nodes | splits A/B | A µs | B µs | B/A | paired B/A [IQR] | split_graph only B/A | goal: paired B/A ≤ {GOAL_OVERHEAD} |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
        for r in &self.sched {
            if let Some(e) = &r.error {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | – | – | – | failed: {} | | | |",
                    r.config.graph,
                    r.config.backends,
                    r.nodes,
                    e.replace('|', "/").replace('\n', " ")
                );
                continue;
            }
            let _ = writeln!(
                s,
                "| {} | {} | {} | {}/{} | {} | {} | {} | {} | {} | {} |",
                r.config.graph,
                r.config.backends,
                r.nodes,
                r.splits[0],
                r.splits[1],
                spread_us(&r.cycle[0]),
                spread_us(&r.cycle[1]),
                ratio_cell(r.ratio()),
                paired_cell(&r.cycle_paired),
                ratio_cell(r.split_ratio()),
                // Judged on the paired ratio, as every other goal here: A and B back to back
                // see the same load, the two medians may not.
                goal_cell(r.cycle_paired.map(|p| p.median <= GOAL_OVERHEAD))
            );
        }
    }

    /// `ggml_backend_sched_reserve` time per configuration that ran, µs.
    fn sched_reserve(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "\n`ggml_backend_sched_reserve` on a fresh graph (llama.cpp calls it when it sizes the compute buffers), and the first `alloc_graph` of a new scheduler after its reserve of a graph of the same shape (once per llama.cpp context; the plan fits, so this is the placement, the fit check and the tensors' addresses, not the planning that reserve times), µs:\n"
        );
        let _ = writeln!(
            s,
            "| graph | backends | reserve A µs | reserve B µs | B/A | first alloc_graph A µs | first alloc_graph B µs | B/A |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        for r in self.sched.iter().filter(|r| r.error.is_none()) {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                r.config.graph,
                r.config.backends,
                spread_us(&r.reserve[0]),
                spread_us(&r.reserve[1]),
                ratio_cell(r.reserve_ratio()),
                spread_us(&r.first_alloc[0]),
                spread_us(&r.first_alloc[1]),
                ratio_cell(r.first_alloc_ratio())
            );
        }
    }

    /// Table 2: callgrind instruction counts per iteration of the cycle and of `reserve` (a dash where an arm has none).
    fn instructions(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "\n### Instructions per iteration (callgrind, timed section only)\n"
        );
        let _ = writeln!(
            s,
            "| graph | backends | cycle A Ir | cycle B Ir | cycle B/A | goal B/A ≤ {GOAL_OVERHEAD} | reserve A Ir | reserve B Ir | reserve B/A |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
        for r in &self.sched {
            let ir = |c: &[Option<Callgrind>; 2], k: usize| {
                c[k].as_ref()
                    .map_or("–".into(), |c| c.ir_per_cycle.to_string())
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.config.graph,
                r.config.backends,
                ir(&r.callgrind, 0),
                ir(&r.callgrind, 1),
                ratio_cell(r.ir_ratio()),
                goal_cell(r.ir_ratio().map(|x| x <= GOAL_OVERHEAD)),
                ir(&r.callgrind_reserve, 0),
                ir(&r.callgrind_reserve, 1),
                ratio_cell(ir_ratio(&r.callgrind_reserve))
            );
        }
    }

    /// Table 3: compute buffers, B/A. Per backend of each benchmark graph configuration, then
    /// per set of models (the benchmark configurations; the real graphs per device
    /// configuration and all together): per-model B/A, the models over 1.00 by name, and the
    /// total, with the goals [`GOAL_MODEL`] and [`GOAL_TOTAL`].
    fn buffers(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "\n### Compute buffers per backend (`ggml_backend_sched_get_buffer_size`)\n"
        );
        let _ = writeln!(
            s,
            "| graph | backends | backend | A bytes | B bytes | B/A |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for r in &self.sched {
            for buf in &r.buffers {
                let ratio = Sized {
                    name: String::new(),
                    bytes: [buf.a as i64, buf.b as i64],
                }
                .ratio();
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {:.3} |",
                    r.config.graph, r.config.backends, buf.backend, buf.a, buf.b, ratio
                );
            }
        }

        let mut sets: Vec<(String, Vec<Sized>)> = vec![(
            "benchmark graph configurations".into(),
            self.sched
                .iter()
                .filter(|r| !r.buffers.is_empty())
                .map(|r| Sized {
                    name: format!("{}, {} backends", r.config.graph, r.config.backends),
                    bytes: [
                        r.buffers.iter().map(|b| b.a as i64).sum(),
                        r.buffers.iter().map(|b| b.b as i64).sum(),
                    ],
                })
                .collect(),
        )];
        let mut all_real = Vec::new();
        for c in &self.cycle {
            let models: Vec<Sized> = c
                .rows()
                .iter()
                .map(|r| {
                    let mut m = r.sized();
                    m.name = format!("{} on {}", m.name, c.devices);
                    m
                })
                .collect();
            all_real.extend(models.iter().cloned());
            sets.push((format!("real graphs on `{}`", c.devices), models));
        }
        if self.cycle.len() > 1 {
            sets.push(("real graphs, every device configuration".into(), all_real));
        }
        let _ = writeln!(
            s,
            "\nPer model (a benchmark graph configuration, or a real graph on one device \
             configuration of the steady-cycle section below, each arm's last process): its \
             compute buffers summed over its backends, B/A. Total: Σ B / Σ A over the models \
             and their backends.\n"
        );
        let _ = writeln!(
            s,
            "| models | n | per-model B/A min / median / max | over {GOAL_MODEL:.2} (B/A) | goal every model ≤ {GOAL_MODEL:.2} | Σ A | Σ B | total B/A | goal total ≤ {GOAL_TOTAL:.2} |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
        for (what, models) in &sets {
            let Some(r) = Ratios::of(models) else {
                let _ = writeln!(s, "| {what} | 0 | – | – | – | – | – | – | – |");
                continue;
            };
            let _ = writeln!(
                s,
                "| {what} | {} | {:.3} / {:.3} / {:.3} | {} | {} | {} | {} | {:.3} | {} |",
                r.per_model.n,
                r.per_model.min,
                r.per_model.median,
                r.per_model.max,
                r.over_cell(),
                goal_cell(Some(r.every_model_met())),
                mib(r.total[0]),
                mib(r.total[1]),
                r.total_ratio(),
                goal_cell(Some(r.total_met()))
            );
        }
    }

    /// The scheduler's heap traffic per configuration and arm (rows only where the arm ran).
    fn heap(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "\n### Scheduler heap use (malloc family interposed in the C program)\n"
        );
        let _ = writeln!(
            s,
            "sched_new: bytes (allocations); first alloc_graph (reserves the buffers): bytes, \
             allocations, peak live; steady cycle (reset + alloc_graph + compute): allocations, bytes, peak live.\n"
        );
        let _ = writeln!(s, "| graph | backends | arm | sched_new | first alloc: bytes / allocs / peak | per cycle: allocs / bytes / peak |");
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for r in &self.sched {
            for (k, arm) in self.arms.iter().enumerate() {
                if let Some(h) = &r.heap[k] {
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} ({}) | {} / {} / {} | {} / {} / {} |",
                        r.config.graph,
                        r.config.backends,
                        arm.key,
                        mib(h.sched_new.bytes),
                        h.sched_new.allocs,
                        mib(h.first_alloc.bytes),
                        h.first_alloc.allocs,
                        mib(h.first_alloc.peak),
                        h.cycle.allocs,
                        mib(h.cycle.bytes),
                        mib(h.cycle.peak)
                    );
                }
            }
        }
    }

    /// Table 4: scheduler time inside test-llama-archs, ms per process, and why the rounds stopped early, if they did.
    fn archs(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "\n### Real graphs: scheduler time inside test-llama-archs (probe: alloc_graph and reserve calls)\n"
        );
        let _ = writeln!(
            s,
            "{} rounds, one process per arm per round (A B, then B A){}; median [min–max] over processes of the \
             total time the process spent inside each function, ms.\n",
            self.archs_rounds,
            self.archs_filter
                .as_ref()
                .map_or(String::new(), |f| format!(", architectures matching `{f}`"))
        );
        let _ = writeln!(s, "| arm | processes | passed | alloc_graph calls | alloc_graph ms | reserve calls | reserve ms | process s |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        let ms = |x: Option<Summary>| {
            x.map_or("–".into(), |v| {
                format!(
                    "{:.2} [{:.2}–{:.2}]",
                    v.median / 1e6,
                    v.min / 1e6,
                    v.max / 1e6
                )
            })
        };
        let mut archs_cells: Vec<[Option<Summary>; 2]> = Vec::new();
        for (k, arm) in self.arms.iter().enumerate() {
            let runs = &self.archs[k];
            let alloc = median_of(runs, |r| r.probe.alloc_graph.ns as f64);
            let reserve = median_of(runs, |r| r.probe.reserve.ns as f64);
            let wall = median_of(runs, |r| r.wall_s);
            archs_cells.push([alloc, reserve]);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                arm.key,
                runs.len(),
                runs.iter().filter(|r| r.passed).count(),
                runs.first().map_or(0, |r| r.probe.alloc_graph.calls),
                ms(alloc),
                runs.first().map_or(0, |r| r.probe.reserve.calls),
                ms(reserve),
                wall.map_or("–".into(), |w| format!("{:.1}", w.median))
            );
        }
        let _ = writeln!(
            s,
            "| B/A | | | | {} | | {} | |",
            ratio_cell(ratio_of(&archs_cells[0][0], &archs_cells[1][0])),
            ratio_cell(ratio_of(&archs_cells[0][1], &archs_cells[1][1]))
        );
        if let Some(e) = &self.archs_error {
            let _ = writeln!(s, "\n- stopped: {}", e.replace('\n', " "));
        }
    }

    /// Table 5, rendered by [`crate::archs_cycle::markdown`]: real graphs, one reset + alloc_graph per token.
    fn archs_cycle(&self, s: &mut String) {
        s.push_str(&crate::archs_cycle::markdown(
            &self.cycle,
            self.cycle_rounds,
            self.cycle_models,
            self.cycle_error.as_deref(),
            GOAL_OVERHEAD,
        ));
    }

    /// Table 6: llama-bench tokens/s per device and test, with the goal.
    fn e2e_tokens(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "\n### End to end (llama-bench, SmolLM2-135M Q4_1, -t 2)\n"
        );
        if self.e2e.is_empty() && self.e2e_probe.is_empty() && self.e2e_errors.is_empty() {
            let _ = writeln!(s, "- not run (`--no-e2e`)");
            return;
        }
        let done: Vec<String> = self
            .e2e_probe
            .iter()
            .filter(|p| !p.reuse_off)
            .map(|p| format!("{} {}", p.device, p.runs[0].len()))
            .collect();
        let _ = writeln!(
            s,
            "Rounds done (of {} asked, within the time budget): {}; one process per arm per round (A B, then B A), \
             -r {} each, then one more per arm for `{}` (`LLAMA_GRAPH_REUSE_DISABLE=1`, `-p 0 -n 128`: every \
             token's graph is built anew and goes through the scheduler's reset and alloc_graph, as where \
             llama.cpp cannot reuse a graph); tokens/s median [min–max] over all repetitions. Load from other processes only \
             slows a run down, so on a shared machine read the paired ratio (A and B back to back) and the \
             ratio of the best runs; the goal is judged on the paired median. p: the signed-rank test \
             of the per-round B/A against 1 (small when B lies on one side of A round after round).\n",
            self.e2e_rounds,
            done.join(", "),
            self.e2e_reps,
            crate::e2e::REUSE_OFF_TEST
        );
        let _ = writeln!(
            s,
            "| device | test | A t/s | B t/s | B/A of medians | B/A of bests | paired B/A [IQR] | goal: paired B/A ≥ {GOAL_TOKENS:.2} |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        for r in &self.e2e {
            let ts = |x: &Option<Summary>| {
                x.map_or("–".into(), |v| {
                    format!("{:.1} [{:.1}–{:.1}]", v.median, v.min, v.max)
                })
            };
            let best = match &r.ts {
                [Some(a), Some(b)] if a.max > 0.0 => Some(b.max / a.max),
                _ => None,
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {}{} | {} |",
                r.device,
                r.test,
                ts(&r.ts[0]),
                ts(&r.ts[1]),
                ratio_cell(r.ratio()),
                ratio_cell(best),
                paired_cell(&r.paired),
                p_suffix(r.paired_p),
                goal_cell(r.paired.map(|p| p.median >= GOAL_TOKENS))
            );
        }
        let below: Vec<BelowOne> = self
            .e2e
            .iter()
            .filter_map(|r| {
                let p = r.paired?.median;
                (p < GOAL_TOKENS).then(|| BelowOne {
                    name: format!("{} {}", r.device, r.test),
                    paired: p,
                    p: r.paired_p,
                })
            })
            .collect();
        if !below.is_empty() {
            let _ = write!(s, "\n{}", below_one_lines(&below));
        }
    }

    /// The scheduler time the probe saw inside those llama-bench processes, µs per call (nothing when no device ran).
    fn e2e_probe(&self, s: &mut String) {
        if !self.e2e_probe.is_empty() {
            let _ = writeln!(
                s,
                "\nScheduler time inside those llama-bench processes (probe), median [min–max] over processes, µs per call:\n"
            );
            let _ = writeln!(s, "| device | arm | alloc_graph calls | alloc_graph µs/call | reserve calls | reserve µs/call |");
            let _ = writeln!(s, "|---|---|---|---|---|---|");
            for p in &self.e2e_probe {
                let device = if p.reuse_off {
                    format!("{}, graph reuse off", p.device)
                } else {
                    p.device.clone()
                };
                let mut cells: Vec<[Option<Summary>; 2]> = Vec::new();
                for (k, arm) in self.arms.iter().enumerate() {
                    let runs = &p.runs[k];
                    let alloc = median_of(runs, |r| r.alloc_graph.per_call_ns());
                    let reserve = median_of(runs, |r| r.reserve.per_call_ns());
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} | {} | {} |",
                        device,
                        arm.key,
                        runs.first().map_or(0, |r| r.alloc_graph.calls),
                        spread_us(&alloc),
                        runs.first().map_or(0, |r| r.reserve.calls),
                        spread_us(&reserve)
                    );
                    cells.push([alloc, reserve]);
                }
                let _ = writeln!(
                    s,
                    "| {} | B/A | | {} | | {} |",
                    device,
                    ratio_cell(ratio_of(&cells[0][0], &cells[1][0])),
                    ratio_cell(ratio_of(&cells[0][1], &cells[1][1]))
                );
            }
        }
    }

    /// How each device was loaded, and the devices that were not measured.
    fn e2e_notes(&self, s: &mut String) {
        for d in &self.e2e_devices {
            if let Some(p) = &d.backend_path {
                let _ = writeln!(
                    s,
                    "\n- {}: `GGML_BACKEND_PATH={}`, `-dev {}`",
                    d.name,
                    p.display(),
                    d.name
                );
            }
        }
        for e in &self.e2e_errors {
            let _ = writeln!(s, "\n- not measured: {}", e.replace('\n', " "));
        }
    }

    /// Half-IQR over median of every measured cycle and llama-bench test, per arm.
    fn noise(&self, s: &mut String) {
        let _ = writeln!(s, "\n### Noise\n");
        for r in &self.sched {
            if let [Some(x), Some(y)] = &r.cycle {
                let _ = writeln!(
                    s,
                    "- {}: half-IQR/median A {:.1}%, B {:.1}%",
                    r.config.name(),
                    100.0 * x.rel_iqr(),
                    100.0 * y.rel_iqr()
                );
            }
        }
        for r in &self.e2e {
            if let [Some(x), Some(y)] = &r.ts {
                let _ = writeln!(
                    s,
                    "- {} {}: half-IQR/median A {:.1}%, B {:.1}%",
                    r.device,
                    r.test,
                    100.0 * x.rel_iqr(),
                    100.0 * y.rel_iqr()
                );
            }
        }
    }

    /// Where the instructions go, for the largest configuration with a B callgrind run: self cost per arm and section, and inclusive cost for B.
    fn callgrind_top(&self, s: &mut String) {
        if let Some(r) = self
            .sched
            .iter()
            .filter(|r| r.callgrind[1].is_some())
            .max_by_key(|r| r.nodes * r.config.backends)
        {
            let sections = [("cycle", &r.callgrind), ("reserve", &r.callgrind_reserve)];
            for ((what, cg), (k, arm)) in sections
                .iter()
                .flat_map(|sec| self.arms.iter().enumerate().map(move |a| (*sec, a)))
            {
                if let Some(c) = &cg[k] {
                    let _ = writeln!(
                        s,
                        "\n### Where the instructions go: {} {what}, arm {} (callgrind, totals over {} iterations, `{}`)\n\nSelf cost:\n\n```",
                        r.config.name(),
                        arm.key,
                        c.iters,
                        c.out_file.display()
                    );
                    for l in &c.top {
                        let _ = writeln!(s, "{l}");
                    }
                    let _ = writeln!(s, "```");
                    if k == 1 {
                        let _ = writeln!(s, "\nInclusive cost:\n\n```");
                        for l in &c.top_inclusive {
                            let _ = writeln!(s, "{l}");
                        }
                        let _ = writeln!(s, "```");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{self, assert_snapshot};
    use super::Report;

    /// One section's renderer.
    type Section = fn(&Report, &mut String);

    /// The sections in document order, with their snapshot names.
    const SECTIONS: [(&str, Section); 13] = [
        ("header", Report::header),
        ("sched_overhead", Report::sched_overhead),
        ("sched_reserve", Report::sched_reserve),
        ("instructions", Report::instructions),
        ("buffers", Report::buffers),
        ("heap", Report::heap),
        ("archs", Report::archs),
        ("archs_cycle", Report::archs_cycle),
        ("e2e_tokens", Report::e2e_tokens),
        ("e2e_probe", Report::e2e_probe),
        ("e2e_notes", Report::e2e_notes),
        ("noise", Report::noise),
        ("callgrind_top", Report::callgrind_top),
    ];

    fn render(r: &Report, section: Section) -> String {
        let mut s = String::new();
        section(r, &mut s);
        s
    }

    #[test]
    fn each_section_matches_its_snapshot() {
        let r = fixture::report();
        for (name, section) in SECTIONS {
            assert_snapshot(name, &render(&r, section));
        }
    }

    /// The section snapshots, in order, are the whole-document snapshot cut into pieces: the
    /// one rendered before the split, so each piece is what the old renderer printed.
    #[test]
    fn section_snapshots_concatenate_to_the_full_snapshot() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/report/snapshots");
        let read = |name: &str| std::fs::read_to_string(dir.join(format!("{name}.md"))).unwrap();
        let pieces: String = SECTIONS.iter().map(|(name, _)| read(name)).collect();
        assert!(
            pieces == read("full"),
            "section snapshots differ from full.md"
        );
    }

    #[test]
    fn buffers_name_the_model_over_one_and_judge_both_goals() {
        let r = fixture::report();
        let md = render(&r, Report::buffers);
        // qwen3moe: B (4_194_304 + 655_360) / A (4_194_304 + 524_288) = 1.0278
        assert!(
            md.contains("| real graphs on `HRX0` | 2 | 0.778 / 0.903 / 1.028 | 1: qwen3moe on HRX0 1.028 | **not met** | 9.00 MiB | 8.12 MiB | 0.903 | **not met** |"),
            "{md}"
        );
        // the benchmark configurations: every one ≤ 1.00, total 0.9994
        assert!(
            md.contains(
                "| benchmark graph configurations | 2 | 0.999 / 0.999 / 0.999 | none | met |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| smollm2 | 2 | FCPU | 1048576 | 1040384 | 0.992 |"),
            "{md}"
        );
        // two device configurations: a row each and one over both, naming the model on each
        let mut two = fixture::report();
        let mut second = two.cycle[0].clone();
        second.devices = "HRX0/HRX1".into();
        two.cycle.push(second);
        let md = render(&two, Report::buffers);
        assert!(
            md.contains("| real graphs, every device configuration | 4 | 0.778 / 0.903 / 1.028 | 2: qwen3moe on HRX0 1.028, qwen3moe on HRX0/HRX1 1.028 | **not met** | 18.00 MiB | 16.25 MiB | 0.903 | **not met** |"),
            "{md}"
        );
        // without real graphs the set still gets its row, with dashes
        let mut none = fixture::report();
        none.cycle[0].runs = [vec![], vec![]];
        let md = render(&none, Report::buffers);
        assert!(
            md.contains("| real graphs on `HRX0` | 0 | – | – | – | – | – | – | – |"),
            "{md}"
        );
    }

    #[test]
    fn an_end_to_end_section_not_run_says_so() {
        let mut r = fixture::report();
        (r.e2e, r.e2e_probe, r.e2e_errors) = (vec![], vec![], vec![]);
        let md = render(&r, Report::e2e_tokens);
        assert!(md.contains("- not run (`--no-e2e`)"), "{md}");
        assert!(!md.contains("Rounds done"), "{md}");
    }

    #[test]
    fn end_to_end_rows_below_one_are_sorted_by_their_p() {
        let mut r = fixture::report();
        // the fixture's rows all meet the goal: no lines under the table
        assert!(!render(&r, Report::e2e_tokens).contains("- below 1.00"));
        let a: Vec<f64> = vec![100.0; 6];
        // B below A in all six rounds: p = 2/64
        let slower: Vec<f64> = (0..6).map(|i| 96.0 + f64::from(i) * 0.1).collect();
        // rounds on both sides of 1
        let spread = vec![97.0, 102.0, 98.0, 101.0, 99.0, 98.5];
        r.e2e = vec![
            fixture::e2e_row("CPU", "pp512", &a, &slower),
            fixture::e2e_row("HRX0", "tg128", &a, &spread),
        ];
        let md = render(&r, Report::e2e_tokens);
        assert!(
            md.contains("- below 1.00 round after round (p < 0.05): CPU pp512 (0.963, p=0.031)\n"),
            "{md}"
        );
        assert!(
            md.contains(
                "- below 1.00 within this run's spread (p ≥ 0.05, rounds on both sides of 1): \
                 HRX0 tg128 (0.988, p="
            ),
            "{md}"
        );
    }

    #[test]
    fn header_says_when_both_arms_are_one_file() {
        let mut r = fixture::report();
        r.arms[1].sha256 = r.arms[0].sha256.clone();
        r.hrx = None;
        assert_snapshot("header_same_file", &render(&r, Report::header));
    }

    #[test]
    fn archs_without_runs_prints_dashes() {
        let mut r = fixture::report();
        r.archs = [vec![], vec![]];
        r.archs_filter = None;
        r.archs_error = Some("test-llama-archs not found".into());
        assert_snapshot("archs_not_run", &render(&r, Report::archs));
    }

    #[test]
    fn sections_without_data_print_nothing() {
        let mut r = fixture::report();
        r.e2e_probe.clear();
        r.e2e_devices.clear();
        r.e2e_errors.clear();
        r.sched.clear();
        r.e2e.clear();
        for (name, section) in [
            ("e2e_probe", Report::e2e_probe as Section),
            ("e2e_notes", Report::e2e_notes),
            ("callgrind_top", Report::callgrind_top),
        ] {
            assert_eq!(render(&r, section), "", "{name}");
        }
        assert_eq!(render(&r, Report::noise), "\n### Noise\n\n");
    }
}
