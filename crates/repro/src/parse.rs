//! Parsing the line-oriented output of `inplace_repro` (see `cabi-tests/inplace-repro/README.md`).

use std::collections::BTreeMap;

/// One `placement case=...` line: where the scheduler put the nodes of one case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// Case number.
    pub case: u32,
    /// `ggml_backend_sched_get_n_splits` after allocation.
    pub splits: u32,
    /// Backend name of the FILL node (`none` when there is no FILL).
    pub fill: String,
    /// Backend name of the SET_ROWS node.
    pub set_rows: String,
    /// Backend name of the consumer (SOFT_MAX).
    pub out: String,
    /// Backend name of the second in-place writer in chain mode (`none` otherwise).
    pub scale: String,
    /// Compute nodes (pure views not counted).
    pub nodes: u32,
    /// Compute nodes not on the device backend.
    pub off_device: u32,
}

/// What one run printed.
#[derive(Debug, Clone, Default)]
pub struct Output {
    /// Path of the mapped `libggml-base` as the process saw it in `/proc/self/maps`.
    pub mapped_base: Option<String>,
    /// Backend names of the scheduler, highest priority first.
    pub sched_backends: Vec<String>,
    /// Placement lines, in order.
    pub placements: Vec<Placement>,
    /// `case N ok` lines.
    pub ok: Vec<u32>,
    /// `case N MISMATCH ...` lines: case and the rest of the line.
    pub mismatches: Vec<(u32, String)>,
    /// The final `P passed, F failed` line.
    pub summary: Option<(u32, u32)>,
    /// Lines starting with `stop:`.
    pub stop_lines: Vec<String>,
}

fn kv(line: &str) -> BTreeMap<&str, &str> {
    line.split_whitespace()
        .filter_map(|t| t.split_once('='))
        .collect()
}

/// Parses stdout of `inplace_repro`. Unknown lines are ignored.
pub fn parse(stdout: &str) -> Output {
    let mut o = Output::default();
    for line in stdout.lines() {
        if let Some(p) = line.strip_prefix("mapped libggml-base: ") {
            o.mapped_base = Some(p.trim().to_owned());
        } else if let Some(b) = line.strip_prefix("scheduler backends:") {
            o.sched_backends = b.split_whitespace().map(str::to_owned).collect();
        } else if let Some(rest) = line.strip_prefix("placement ") {
            let m = kv(rest);
            let num = |k: &str| m.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
            let s = |k: &str| m.get(k).copied().unwrap_or("?").to_owned();
            o.placements.push(Placement {
                case: num("case"),
                splits: num("splits"),
                fill: s("fill"),
                set_rows: s("set_rows"),
                out: s("out"),
                scale: m.get("scale").copied().unwrap_or("none").to_owned(),
                nodes: num("nodes"),
                off_device: num("off_device"),
            });
        } else if let Some(rest) = line.strip_prefix("case ") {
            let mut it = rest.splitn(2, ' ');
            let n = it.next().and_then(|n| n.parse().ok());
            let tail = it.next().unwrap_or("");
            match n {
                Some(n) if tail == "ok" => o.ok.push(n),
                Some(n) if tail.starts_with("MISMATCH") => o.mismatches.push((n, tail.to_owned())),
                _ => {}
            }
        } else if line.starts_with("stop:") {
            o.stop_lines.push(line.to_owned());
        } else if let Some((p, f)) = line.split_once(" passed, ") {
            if let (Ok(p), Some(Ok(f))) = (
                p.trim().parse(),
                f.strip_suffix(" failed").map(|f| f.trim().parse()),
            ) {
                o.summary = Some((p, f));
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_run() {
        let text = "mapped libggml-base: /x/libggml-base.so.0.25.3\n\
            scheduler backends: HRX0 CPU\n\
            placement case=0 n_blk=8 k=3 nc=2 n_stream=1 idx=i32 splits=3 fill=HRX0 set_rows=CPU out=HRX0 nodes=3 off_device=1\n\
            case 0 ok\n\
            case 1 MISMATCH max_err=inf status=0\n\
            1 passed, 1 failed\n";
        let o = parse(text);
        assert_eq!(o.mapped_base.as_deref(), Some("/x/libggml-base.so.0.25.3"));
        assert_eq!(o.sched_backends, vec!["HRX0", "CPU"]);
        assert_eq!(
            o.placements,
            vec![Placement {
                case: 0,
                splits: 3,
                fill: "HRX0".into(),
                set_rows: "CPU".into(),
                out: "HRX0".into(),
                scale: "none".into(),
                nodes: 3,
                off_device: 1
            }]
        );
        assert_eq!(o.ok, vec![0]);
        assert_eq!(o.mismatches.len(), 1);
        assert_eq!(o.mismatches[0].0, 1);
        assert_eq!(o.summary, Some((1, 1)));
    }

    #[test]
    fn a_run_that_died_has_no_summary() {
        let o = parse("mapped libggml-base: /a\nplacement case=0 splits=2\n");
        assert_eq!(o.summary, None);
        assert_eq!(o.placements.len(), 1);
        assert_eq!(o.placements[0].splits, 2);
        assert!(o.ok.is_empty());
    }
}
