//! What one seed produced in one arm, and how two arms' results for a seed compare.
//!
//! The C driver (`cabi-tests/sched-diff/sched_diff.c`) prints one block per seed:
//! `SEED <s> BEGIN`, the records, `SEED <s> END`. A block without its `END` line belongs to
//! a process that died inside that seed. The record grammar is in the driver's header
//! comment and in `docs/sched-diff.md`.

/// How a process died inside a seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crash {
    /// Exit status in words: `signal 6 (SIGABRT)`, `exit code 3`, `timeout after 60 s`.
    pub how: String,
    /// The ggml abort message (the driver's `ABORT` record) with its `file:line: ` prefix
    /// removed, when the process died through `ggml_abort`.
    pub abort: Option<String>,
    /// The last lines the process wrote to stderr (ggml's warnings and errors).
    pub stderr_tail: String,
}

/// One seed's result in one arm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedRun {
    /// The seed.
    pub seed: u64,
    /// The seed's records, without the `SEED` marker lines and without `ABORT` records.
    pub lines: Vec<String>,
    /// Set when the process died inside this seed.
    pub crash: Option<Crash>,
}

/// A parsed `SEED` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The seed named by the `BEGIN` line.
    pub seed: u64,
    /// Records between the markers, `ABORT` records excluded.
    pub lines: Vec<String>,
    /// The abort message, prefix removed (see [`strip_location`]).
    pub abort: Option<String>,
    /// Whether the `END` line was seen.
    pub complete: bool,
}

/// Splits a driver's stdout into seed blocks, in order. Lines outside blocks are ignored,
/// except an `ABORT` record, which is attached to the block it follows; lines after it in
/// its block are the rest of its message, and the message's trailing whitespace is removed.
///
/// Errors when a `BEGIN` line cannot be read or an `END` line names another seed than the
/// open block: that is a broken driver, not a scheduler result.
pub fn parse_blocks(stdout: &str) -> anyhow::Result<Vec<Block>> {
    let mut blocks: Vec<Block> = Vec::new();
    let mut open = false;
    let mut in_abort = false;
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("SEED ") {
            let mut it = rest.split(' ');
            let seed: u64 = it
                .next()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("bad seed marker: {line}"))?;
            match it.next() {
                Some("BEGIN") => {
                    blocks.push(Block {
                        seed,
                        lines: Vec::new(),
                        abort: None,
                        complete: false,
                    });
                    open = true;
                    in_abort = false;
                }
                Some("END") => {
                    let b = blocks
                        .last_mut()
                        .filter(|b| open && b.seed == seed)
                        .ok_or_else(|| anyhow::anyhow!("unmatched {line}"))?;
                    b.complete = true;
                    open = false;
                }
                _ => anyhow::bail!("bad seed marker: {line}"),
            }
        } else if let Some(msg) = line.strip_prefix("ABORT ") {
            if let Some(b) = blocks.last_mut() {
                b.abort = Some(strip_location(msg).to_string());
                in_abort = open;
            }
        } else if in_abort && open {
            // the message went on over more lines (stock's end in a newline): the process
            // dies right after the abort record, so what follows is the message's
            if let Some(m) = blocks.last_mut().and_then(|b| b.abort.as_mut()) {
                m.push('\n');
                m.push_str(line);
            }
        } else if open {
            if let Some(b) = blocks.last_mut() {
                b.lines.push(line.to_string());
            }
        }
    }
    for b in &mut blocks {
        // the two libraries end their messages differently (stock with a newline)
        if let Some(m) = &mut b.abort {
            m.truncate(m.trim_end().len());
        }
    }
    Ok(blocks)
}

/// Removes a leading `path:line: ` from an abort message: the two libraries abort from
/// different source files, so only the text after it is comparable.
pub fn strip_location(msg: &str) -> &str {
    let mut search = 0;
    while let Some(pos) = msg[search..].find(": ") {
        let head = &msg[..search + pos];
        if let Some((_, digits)) = head.rsplit_once(':') {
            if !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()) {
                return &msg[search + pos + 2..];
            }
        }
        search += pos + 2;
    }
    msg
}

fn inplace_lines(lines: &[String]) -> impl Iterator<Item = &String> {
    lines.iter().filter(|l| l.starts_with("INPLACE "))
}

fn breaks_rule(l: &str) -> bool {
    l.ends_with(" rule=violated")
}

fn unusable(l: &str) -> bool {
    l.contains(" usable=no ")
}

/// A node's read that fails a judgement (`READ ... usable=no` or `rule=violated`; the driver
/// writes no other).
fn read_lines(lines: &[String]) -> impl Iterator<Item = &String> {
    lines
        .iter()
        .filter(|l| l.starts_with("READ ") && (breaks_rule(l) || unusable(l)))
}

/// Whether a seed's records show an in-place hazard: a writer placed against the
/// co-location rule (`rule=violated`) or a writer on a backend that cannot use the
/// buffer type of the memory it writes (`usable=no`); a read judged so (a `READ` line);
/// a copy of a view whose root the reader could use ([`has_view_copy`]); or a stale copy
/// read again after its source was written in place ([`has_stale_reread`]).
/// See `docs/sched-diff.md`.
pub fn has_inplace_conflict(lines: &[String]) -> bool {
    inplace_lines(lines).any(|l| breaks_rule(l) || unusable(l))
        || has_unusable_read(lines)
        || has_view_copy(lines)
        || has_stale_reread(lines)
}

/// Whether a seed's records show a node reading a stale split-input copy: a `REREAD` line
/// (a copy read again after an in-place writer of its source's root ran) whose copy the
/// `COMPUTE` trace that follows does not fill again between the writer's `RUN` and the
/// reader's. Stock fills a copy once per backend, in the first split that reads it.
pub fn has_stale_reread(lines: &[String]) -> bool {
    // The test devices whose buffers are in host memory (`DEV <i> <name> ... host=1`): a
    // copy on one of them is filled by a `GET` of its source.
    let host: Vec<&str> = lines
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.strip_prefix("DEV ")?.split(' ').collect();
            f.contains(&"host=1").then(|| f.get(1).copied()).flatten()
        })
        .collect();
    let mut pending: Vec<(&str, &str, &str, &str)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].as_str();
        if let Some(rest) = l.strip_prefix("REREAD ") {
            let f: Vec<&str> = rest.split(' ').collect();
            let field = |k: &str| f.iter().find_map(|x| x.strip_prefix(k)).unwrap_or_default();
            if f.len() >= 2 {
                pending.push((f[1], field("copy="), field("src="), field("writer=")));
            }
        } else if l == "COMPUTE" && !pending.is_empty() {
            let end = lines[i..]
                .iter()
                .position(|x| x.starts_with("STATUS "))
                .map_or(lines.len(), |p| i + p);
            let trace = &lines[i + 1..end];
            if pending.iter().any(|&(reader, copy, src, writer)| {
                let on_host = copy.split('#').next().is_some_and(|d| host.contains(&d));
                stale_in_trace(trace, reader, copy, on_host.then_some(src), writer)
            }) {
                return true;
            }
            pending.clear();
        }
        i += 1;
    }
    false
}

/// Whether, in a `COMPUTE` trace, the first `RUN` of `reader` after the last `RUN` of
/// `writer` comes with no fill of `copy` in between (and the writer ran at all). `host_src`:
/// the copy's source when the copy is in host memory, where a `GET` of it fills the copy.
fn stale_in_trace(
    trace: &[String],
    reader: &str,
    copy: &str,
    host_src: Option<&str>,
    writer: &str,
) -> bool {
    let runs = |name: &str, l: &str| {
        l.trim_start()
            .strip_prefix("RUN ")
            .and_then(|r| r.split_once(": "))
            .is_some_and(|(_, names)| names.split(' ').any(|n| n == name))
    };
    let Some(w) = trace.iter().rposition(|l| runs(writer, l)) else {
        return false;
    };
    let Some(r) = trace[w..].iter().position(|l| runs(reader, l)) else {
        return false;
    };
    // Filled by a copy between backends (`CPY <buf> <src> -> <buf> <copy>`), by a write
    // from host memory (`SET <buf> <copy> <offset> <size>`), or, a copy in host memory, by a
    // read of the source (`GET <buf> <src> ...`: the trace names no copy then; one right
    // after the eval callback's `SEE <src>` is the callback's own read).
    let span = &trace[w..w + r];
    let filled = span.iter().enumerate().any(|(k, l)| {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.first() {
            Some(&"CPY") => f.last() == Some(&copy),
            Some(&"SET") => f.get(2) == Some(&copy),
            Some(&"GET") => host_src.is_some_and(|src| {
                f.get(2) == Some(&src)
                    && (k == 0 || span[k - 1].split_whitespace().ne(["SEE", src]))
            }),
            _ => false,
        }
    });
    !filled
}

/// Whether a seed's records show a node reading a split-input copy of a view whose root its
/// backend could use (`VIEWCOPY` lines): the view judged by its own placement, as stock
/// judges it. The copy is made at the start of the reader's split, so it is stale when that
/// split computes the root (a view placed apart from a root beside its reader), and
/// needless otherwise.
pub fn has_view_copy(lines: &[String]) -> bool {
    lines.iter().any(|l| l.starts_with("VIEWCOPY "))
}

/// Whether a seed's records show a node reading memory its backend cannot use (`READ`
/// lines): by where the memory is (`usable=no`: ggml-alloc moved it into another backend's
/// buffer), or by the scheduler's placement of the read root (`rule=violated`: a view
/// placed apart from its root, judged by the view's placement).
pub fn has_unusable_read(lines: &[String]) -> bool {
    read_lines(lines).next().is_some()
}

/// Whether a seed's records show a writer on a backend that cannot use the buffer type
/// of the memory it writes (`usable=no`): on a device without host mapping, a fault.
pub fn has_unusable_write(lines: &[String]) -> bool {
    inplace_lines(lines).any(|l| unusable(l))
}

/// Whether a seed's hazards all come from ggml-alloc placing the written storage over a
/// parent's memory in another backend's buffer (`root_alloc=reused`, `usable=no`) while
/// the scheduler's own placement keeps the rule. False when there is no hazard.
pub fn hazards_only_via_reuse(lines: &[String]) -> bool {
    let mut v = inplace_lines(lines)
        .filter(|l| breaks_rule(l) || unusable(l))
        .peekable();
    v.peek().is_some() && v.all(|l| !breaks_rule(l) && l.contains(" root_alloc=reused "))
}

/// Whether an abort message reads as a refusal by the in-place co-location rule.
pub fn is_inplace_refusal(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    m.contains("in-place") || m.contains("inplace")
}

/// Whether a record is one of ggml-alloc's results: where a tensor's data lives (`DATA`),
/// a test buffer type's allocation (`ALLOCBUF`, indented), a compute buffer's size
/// (`BUFSIZE`).
fn is_allocation_record(l: &str) -> bool {
    let l = l.trim_start();
    l.starts_with("DATA ") || l.starts_with("ALLOCBUF ") || l.starts_with("BUFSIZE ")
}

/// Whether the two arms put some tensor's data elsewhere: their `DATA` records (buffer and
/// byte offset of every leaf, node and split-input copy) differ.
pub fn data_differs(a: &[String], b: &[String]) -> bool {
    fn data(v: &[String]) -> impl Iterator<Item = &String> {
        v.iter().filter(|l| l.starts_with("DATA "))
    }
    data(a).ne(data(b))
}

/// Whether the two arms differ only in allocation records ([`is_allocation_record`]): the
/// scheduler decided the same, ggml-alloc placed or sized something differently. False when
/// the records are equal or either arm crashed.
pub fn differs_only_in_allocation(a: &SeedRun, b: &SeedRun) -> bool {
    fn rest(r: &SeedRun) -> impl Iterator<Item = &String> {
        r.lines.iter().filter(|l| !is_allocation_record(l))
    }
    a.crash.is_none() && b.crash.is_none() && a.lines != b.lines && rest(a).eq(rest(b))
}

/// How arm B's result for a seed relates to arm A's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Same records, neither process died.
    Identical,
    /// Both processes died in this seed after identical records (abort texts may differ).
    IdenticalBothCrashed,
    /// Records differ; A placed an in-place writer against the co-location rule, B placed
    /// none so, and B run again with the rule off (`GGML_SCHED_INPLACE_RULE=0`) matches A
    /// ([`matches_parity`]): the difference is the one the in-place rule makes.
    ExplainedMoved,
    /// A had such a conflict, B stopped with an abort that names the in-place rule, and B
    /// with the rule off matches A.
    ExplainedRefused,
    /// Only allocation records differ ([`differs_only_in_allocation`]) and no compute buffer of
    /// B is larger than A's ([`buffers_not_larger`]): what B's packed allocation layout does
    /// (`--b-layout packed`).
    ExplainedLayout,
    /// Any other difference.
    Unexplained,
}

impl Verdict {
    /// Whether this verdict counts as a difference between the arms.
    pub fn differs(self) -> bool {
        !matches!(self, Verdict::Identical | Verdict::IdenticalBothCrashed)
    }
}

/// The compute-buffer sizes a run reports (`BUFSIZE <backend> <bytes>`), in order.
pub fn buffer_sizes(lines: &[String]) -> Vec<(&str, u64)> {
    lines
        .iter()
        .filter_map(|l| {
            let mut f = l.strip_prefix("BUFSIZE ")?.split(' ');
            Some((f.next()?, f.next()?.parse().ok()?))
        })
        .collect()
}

/// Whether B reports the same compute buffers as A, in the same order, none of them larger.
pub fn buffers_not_larger(a: &[String], b: &[String]) -> bool {
    let (sa, sb) = (buffer_sizes(a), buffer_sizes(b));
    sa.len() == sb.len() && sa.iter().zip(&sb).all(|(x, y)| x.0 == y.0 && y.1 <= x.1)
}

/// The verdict without the in-place rule: identical, both crashed identically, explained by
/// the packed layout (with `packed`), or unexplained.
fn classify_plain(a: &SeedRun, b: &SeedRun, packed: bool) -> Verdict {
    let same_lines = a.lines == b.lines;
    match (&a.crash, &b.crash) {
        (None, None) if same_lines => Verdict::Identical,
        (Some(_), Some(_)) if same_lines => Verdict::IdenticalBothCrashed,
        _ if packed
            && differs_only_in_allocation(a, b)
            && buffers_not_larger(&a.lines, &b.lines) =>
        {
            Verdict::ExplainedLayout
        }
        _ => Verdict::Unexplained,
    }
}

/// Which in-place verdict B's run would get if B with the rule off matches A: `Some` when
/// A has an in-place hazard, B differs from A without one ([`classify_plain`] finds no
/// other explanation), and B either completed the seed or stopped with an abort naming the
/// rule. Only these seeds need B's second run with `GGML_SCHED_INPLACE_RULE=0`.
pub fn inplace_candidate(a: &SeedRun, b: &SeedRun, packed: bool) -> Option<Verdict> {
    if classify_plain(a, b, packed) != Verdict::Unexplained
        || !has_inplace_conflict(&a.lines)
        || has_inplace_conflict(&b.lines)
    {
        return None;
    }
    match &b.crash {
        None => Some(Verdict::ExplainedMoved),
        Some(c) if c.abort.as_deref().is_some_and(is_inplace_refusal) => {
            Some(Verdict::ExplainedRefused)
        }
        Some(_) => None,
    }
}

/// Whether B run with the in-place rule off (`b_off`) matches A in everything the tool
/// compares: the parity mode, which must hold on every seed.
pub fn matches_parity(a: &SeedRun, b_off: &SeedRun, packed: bool) -> bool {
    classify_plain(a, b_off, packed) != Verdict::Unexplained
}

/// Compares one seed across the arms. Both runs must be for the same seed. With `packed`
/// (arm B runs its packed allocation layout), a seed whose only differences are where
/// ggml-alloc put tensors and how large the buffers are, none larger in B, is explained.
///
/// A difference is explained by the in-place rule ([`inplace_candidate`]) only when `b_off`,
/// B's run of the same seed with the rule off, is given and matches A ([`matches_parity`]):
/// turning the rule off must remove the difference. Without `b_off` such a seed is
/// unexplained.
pub fn classify(a: &SeedRun, b: &SeedRun, b_off: Option<&SeedRun>, packed: bool) -> Verdict {
    debug_assert_eq!(a.seed, b.seed);
    let plain = classify_plain(a, b, packed);
    if plain != Verdict::Unexplained {
        return plain;
    }
    match (inplace_candidate(a, b, packed), b_off) {
        (Some(v), Some(off)) if off.seed == a.seed && matches_parity(a, off, packed) => v,
        _ => Verdict::Unexplained,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seed: u64, lines: &[&str], crash: Option<&str>) -> SeedRun {
        SeedRun {
            seed,
            lines: lines.iter().map(|s| s.to_string()).collect(),
            crash: crash.map(|m| Crash {
                how: "signal 6 (SIGABRT)".into(),
                abort: Some(m.to_string()),
                stderr_tail: String::new(),
            }),
        }
    }

    #[test]
    fn parses_complete_and_crashed_blocks() {
        let out = "SEED 4 BEGIN\nNODE 0 t1 ADD T0\nSEED 4 END\nSEED 5 BEGIN\nNODE 0 t2 MUL TCPU\n\
                   ABORT /x/ggml-backend.cpp:941: pre-allocated tensor (t3) in a buffer\n";
        let b = parse_blocks(out).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].seed, 4);
        assert!(b[0].complete);
        assert_eq!(b[0].lines, vec!["NODE 0 t1 ADD T0".to_string()]);
        assert_eq!(b[1].seed, 5);
        assert!(!b[1].complete);
        assert_eq!(b[1].lines.len(), 1);
        assert_eq!(
            b[1].abort.as_deref(),
            Some("pre-allocated tensor (t3) in a buffer")
        );
    }

    /// Stock's abort messages end in a newline, ours do not (GGML_SCHED_DEBUG_REALLOC=2):
    /// the same abort is the same block and the same message in both arms.
    #[test]
    fn an_abort_message_ending_in_a_newline_is_the_same_abort() {
        let stock = "SEED 1 BEGIN\nPRE w6 f32 [4,8,1,1] T1_BUF weights\n\
                     ABORT /x/ggml-backend.cpp:1: ggml_backend_sched_alloc_splits: unexpected graph reallocation, debug_realloc = 2\n\n";
        let ours = "SEED 1 BEGIN\nPRE w6 f32 [4,8,1,1] T1_BUF weights\n\
                    ABORT src/sched/mod.rs:9: ggml_backend_sched_alloc_splits: unexpected graph reallocation, debug_realloc = 2\n";
        let (a, b) = (
            &parse_blocks(stock).unwrap()[0],
            &parse_blocks(ours).unwrap()[0],
        );
        assert_eq!(
            a.lines,
            vec!["PRE w6 f32 [4,8,1,1] T1_BUF weights".to_string()]
        );
        assert_eq!(a.lines, b.lines);
        assert_eq!(
            a.abort.as_deref(),
            Some(
                "ggml_backend_sched_alloc_splits: unexpected graph reallocation, debug_realloc = 2"
            )
        );
        assert_eq!(a.abort, b.abort);
        let crashed = |blk: &Block| SeedRun {
            seed: blk.seed,
            lines: blk.lines.clone(),
            crash: Some(Crash {
                how: "signal 6 (SIGABRT)".into(),
                abort: blk.abort.clone(),
                stderr_tail: String::new(),
            }),
        };
        assert_eq!(
            classify(&crashed(a), &crashed(b), None, false),
            Verdict::IdenticalBothCrashed
        );
        // a message over several lines keeps its inner line breaks
        let multi = parse_blocks("SEED 2 BEGIN\nABORT a.c:1: first\nsecond  \n\n").unwrap();
        assert_eq!(multi[0].abort.as_deref(), Some("first\nsecond"));
        assert!(multi[0].lines.is_empty());
    }

    #[test]
    fn rejects_mismatched_end() {
        assert!(parse_blocks("SEED 1 BEGIN\nSEED 2 END\n").is_err());
        assert!(parse_blocks("SEED x BEGIN\n").is_err());
    }

    #[test]
    fn strips_file_and_line_only() {
        assert_eq!(
            strip_location("a/b.c:12: GGML_ASSERT(x) failed"),
            "GGML_ASSERT(x) failed"
        );
        assert_eq!(
            strip_location("src/sched/mod.rs:7: in-place: no"),
            "in-place: no"
        );
        assert_eq!(strip_location("no location: here"), "no location: here");
    }

    #[test]
    fn classifies_identical_and_plain_differences() {
        let a = run(1, &["NODE 0 t1 ADD T0"], None);
        assert_eq!(classify(&a, &a.clone(), None, false), Verdict::Identical);
        let b = run(1, &["NODE 0 t1 ADD TCPU"], None);
        assert_eq!(classify(&a, &b, None, false), Verdict::Unexplained);
        let ca = run(1, &["NODE 0 t1 ADD T0"], Some("x"));
        let cb = run(1, &["NODE 0 t1 ADD T0"], Some("y"));
        assert_eq!(
            classify(&ca, &cb, None, false),
            Verdict::IdenticalBothCrashed
        );
        assert_eq!(classify(&a, &cb, None, false), Verdict::Unexplained);
        assert!(!Verdict::IdenticalBothCrashed.differs());
        assert!(Verdict::ExplainedMoved.differs());
    }

    #[test]
    fn an_offset_difference_alone_is_unexplained_and_counted_as_allocation() {
        let node = "NODE 0 t1 ADD T0 s0=i0@T0 buf=T0_BUF";
        let a = run(
            2,
            &[
                "  ALLOCBUF T0_BUF 512 buf=T0_BUF#0",
                node,
                "DATA t1 T0_BUF#0 256",
                "BUFSIZE T0 512",
            ],
            None,
        );
        // the same decisions, ggml-alloc put t1 at another offset of a smaller buffer
        let b = run(
            2,
            &[
                "  ALLOCBUF T0_BUF 384 buf=T0_BUF#0",
                node,
                "DATA t1 T0_BUF#0 128",
                "BUFSIZE T0 384",
            ],
            None,
        );
        assert_eq!(classify(&a, &b, None, false), Verdict::Unexplained);
        assert!(data_differs(&a.lines, &b.lines));
        assert!(differs_only_in_allocation(&a, &b));
        assert!(!differs_only_in_allocation(&a, &a.clone()));
        // a buffer size alone: not a data difference, still an allocation-only one
        let c = run(
            2,
            &[
                "  ALLOCBUF T0_BUF 640 buf=T0_BUF#0",
                node,
                "DATA t1 T0_BUF#0 256",
                "BUFSIZE T0 640",
            ],
            None,
        );
        assert!(!data_differs(&a.lines, &c.lines));
        assert!(differs_only_in_allocation(&a, &c));
        // another placement as well: not allocation-only
        let d = run(
            2,
            &[
                "  ALLOCBUF T0_BUF 512 buf=T0_BUF#0",
                "NODE 0 t1 ADD TCPU s0=i0@T0 buf=T0_BUF",
                "DATA t1 T0_BUF#0 128",
            ],
            None,
        );
        assert!(data_differs(&a.lines, &d.lines));
        assert!(!differs_only_in_allocation(&a, &d));
        // B's packed layout: a smaller buffer is explained, a larger one and a moved node not
        assert_eq!(classify(&a, &b, None, true), Verdict::ExplainedLayout);
        assert_eq!(classify(&a, &c, None, true), Verdict::Unexplained);
        assert_eq!(classify(&a, &d, None, true), Verdict::Unexplained);
        assert!(buffers_not_larger(&a.lines, &b.lines));
        assert!(!buffers_not_larger(&a.lines, &c.lines));
    }

    #[test]
    fn classifies_inplace_rule_differences() {
        let conflict = "INPLACE 1 t2 SET_ROWS node=TCPU root=t1 root_backend=T0 root_buft=T0_BUF root_alloc=sched usable=no rule=violated";
        let fixed = "INPLACE 1 t2 SET_ROWS node=T0 root=t1 root_backend=T0 root_buft=T0_BUF root_alloc=sched usable=yes rule=ok";
        assert!(has_unusable_write(&[conflict.to_string()]));
        assert!(!has_unusable_write(&[fixed.to_string()]));
        assert!(!has_inplace_conflict(&[fixed.to_string()]));
        // a peer-usable but device-local producer buffer: the rule wants co-location
        let peer = "INPLACE 1 t2 SET node=T2 root=t1 root_backend=T0 root_buft=T0_BUF root_alloc=sched usable=yes rule=violated";
        assert!(has_inplace_conflict(&[peer.to_string()]));
        assert!(!has_unusable_write(&[peer.to_string()]));
        assert!(!hazards_only_via_reuse(&[peer.to_string()]));
        // ggml-alloc put the root into another buffer the writer cannot use
        let reused = "INPLACE 2 t7 SET node=T1 root=t4 root_backend=T0 root_buft=TCPU_BUF root_alloc=reused usable=no rule=ok";
        assert!(has_inplace_conflict(&[reused.to_string()]));
        assert!(hazards_only_via_reuse(&[
            reused.to_string(),
            fixed.to_string()
        ]));
        assert!(!hazards_only_via_reuse(&[
            reused.to_string(),
            peer.to_string()
        ]));
        assert!(!hazards_only_via_reuse(&[fixed.to_string()]));
        let a = run(3, &["NODE 1 t2 SET_ROWS TCPU", conflict], None);
        let b = run(3, &["NODE 1 t2 SET_ROWS T0", fixed], None);
        // B with the rule off places as A: the rule made the difference
        let off = a.clone();
        assert_eq!(
            inplace_candidate(&a, &b, false),
            Some(Verdict::ExplainedMoved)
        );
        assert_eq!(classify(&a, &b, Some(&off), false), Verdict::ExplainedMoved);
        // without the rule-off run nothing is excused
        assert_eq!(classify(&a, &b, None, false), Verdict::Unexplained);
        // B still conflicts: not explained by the rule
        let b2 = run(3, &["NODE 1 t2 SET_ROWS T1", conflict], None);
        assert_eq!(inplace_candidate(&a, &b2, false), None);
        assert_eq!(classify(&a, &b2, Some(&off), false), Verdict::Unexplained);
        // B refuses with a message naming the rule
        let b3 = run(
            3,
            &["NODE 1 t2 SET_ROWS TCPU"],
            Some("in-place write to t1 refused"),
        );
        assert_eq!(
            classify(&a, &b3, Some(&off), false),
            Verdict::ExplainedRefused
        );
        // B dies for another reason
        let b4 = run(
            3,
            &["NODE 1 t2 SET_ROWS TCPU"],
            Some("GGML_ASSERT(x) failed"),
        );
        assert_eq!(inplace_candidate(&a, &b4, false), None);
        assert_eq!(classify(&a, &b4, Some(&off), false), Verdict::Unexplained);
        // A without a conflict: any difference is unexplained
        let a2 = run(3, &["NODE 1 t2 SET_ROWS TCPU"], None);
        assert_eq!(inplace_candidate(&a2, &b, false), None);
        assert_eq!(classify(&a2, &b, Some(&a2), false), Verdict::Unexplained);
    }

    /// The false pass the review found (self-test, seeds 49, 98, 168): A has a hazard, B has
    /// none, and B differs from A for a reason that is not the rule (here an extra node on
    /// another backend). B run with the rule off still differs from A, so the difference
    /// is unexplained; only a rule-off run identical to A excuses it.
    #[test]
    fn a_difference_the_rule_off_run_keeps_is_unexplained() {
        let conflict = "INPLACE 1 t2 SET_ROWS node=TCPU root=t1 root_backend=T0 root_buft=T0_BUF root_alloc=sched usable=no rule=violated";
        let fixed = "INPLACE 1 t2 SET_ROWS node=T0 root=t1 root_backend=T0 root_buft=T0_BUF root_alloc=sched usable=yes rule=ok";
        let a = run(
            49,
            &["NODE 0 t1 FILL T0", "NODE 1 t2 SET_ROWS TCPU", conflict],
            None,
        );
        // ours with the rule moved the writer, and a regression moved t1 as well
        let b = run(
            49,
            &["NODE 0 t1 FILL T1", "NODE 1 t2 SET_ROWS T0", fixed],
            None,
        );
        // the rule off: the writer is back where stock puts it, the regression is not
        let off_regressed = run(
            49,
            &["NODE 0 t1 FILL T1", "NODE 1 t2 SET_ROWS TCPU", conflict],
            None,
        );
        assert_eq!(
            inplace_candidate(&a, &b, false),
            Some(Verdict::ExplainedMoved)
        );
        assert!(!matches_parity(&a, &off_regressed, false));
        assert_eq!(
            classify(&a, &b, Some(&off_regressed), false),
            Verdict::Unexplained
        );
        // the rule off matching A in every record: explained
        assert!(matches_parity(&a, &a.clone(), false));
        assert_eq!(
            classify(&a, &b, Some(&a.clone()), false),
            Verdict::ExplainedMoved
        );
        // a rule-off run that crashed where A did not: unexplained
        let off_crashed = run(
            49,
            &a.lines.iter().map(String::as_str).collect::<Vec<_>>(),
            Some("x"),
        );
        assert_eq!(
            classify(&a, &b, Some(&off_crashed), false),
            Verdict::Unexplained
        );
        // an in-place refusal is excused only by a rule-off run that matches A as well
        let refused = run(
            49,
            &["NODE 0 t1 FILL T0"],
            Some("in-place write to t1 refused"),
        );
        assert_eq!(
            inplace_candidate(&a, &refused, false),
            Some(Verdict::ExplainedRefused)
        );
        assert_eq!(
            classify(&a, &refused, Some(&off_regressed), false),
            Verdict::Unexplained
        );
        assert_eq!(classify(&a, &refused, None, false), Verdict::Unexplained);
        assert_eq!(
            classify(&a, &refused, Some(&a.clone()), false),
            Verdict::ExplainedRefused
        );
    }

    /// With `--b-layout packed` the rule-off run may differ from A in allocation records
    /// only, no buffer larger, as any packed seed may.
    #[test]
    fn the_rule_off_run_follows_the_packed_layout_verdict() {
        let conflict = "INPLACE 1 t2 SET node=TCPU root=t1 root_backend=T0 root_buft=T0_BUF root_alloc=sched usable=no rule=violated";
        let fixed = "INPLACE 1 t2 SET node=T0 root=t1 root_backend=T0 root_buft=T0_BUF root_alloc=sched usable=yes rule=ok";
        let a = run(
            5,
            &[
                "NODE 1 t2 SET TCPU",
                "DATA t2 T0_BUF#0 256",
                conflict,
                "BUFSIZE T0 512",
            ],
            None,
        );
        let b = run(
            5,
            &[
                "NODE 1 t2 SET T0",
                "DATA t2 T0_BUF#0 0",
                fixed,
                "BUFSIZE T0 256",
            ],
            None,
        );
        let off_packed = run(
            5,
            &[
                "NODE 1 t2 SET TCPU",
                "DATA t2 T0_BUF#0 0",
                conflict,
                "BUFSIZE T0 256",
            ],
            None,
        );
        let off_larger = run(
            5,
            &[
                "NODE 1 t2 SET TCPU",
                "DATA t2 T0_BUF#0 0",
                conflict,
                "BUFSIZE T0 768",
            ],
            None,
        );
        assert_eq!(
            classify(&a, &b, Some(&off_packed), true),
            Verdict::ExplainedMoved
        );
        assert_eq!(
            classify(&a, &b, Some(&off_packed), false),
            Verdict::Unexplained
        );
        assert_eq!(
            classify(&a, &b, Some(&off_larger), true),
            Verdict::Unexplained
        );
    }

    /// A copy read again after its source was written in place is stale unless the trace
    /// fills it between the writer's run and the reader's: by a copy between backends, a
    /// write from host memory, or (a copy in host memory) a read of the source that is not
    /// the eval callback's.
    #[test]
    fn a_reread_copy_is_stale_unless_the_trace_fills_it_again() {
        let seed = |copy: &str, fill: &[&str]| -> Vec<String> {
            let mut v = vec![
                "DEV 0 T0 buft=T0_BUF host=0 align=16".to_string(),
                "DEV 1 TCPU buft=TCPU_BUF host=1 align=64".to_string(),
                format!("REREAD 5 r copy={copy} src=s writer=w"),
                "COMPUTE".to_string(),
                "  RUN T0 1: s".to_string(),
                "  RUN TCPU 2: a w".to_string(),
            ];
            v.extend(fill.iter().map(|l| l.to_string()));
            v.push("  RUN T0 2: b r".to_string());
            v.push("STATUS 0".to_string());
            v
        };
        assert!(has_stale_reread(&seed("T0#s#0", &[])));
        assert!(has_inplace_conflict(&seed("T0#s#0", &[])));
        assert!(!has_stale_reread(&seed(
            "T0#s#0",
            &["  CPY TCPU_BUF s -> T0_BUF T0#s#0"]
        )));
        assert!(!has_stale_reread(&seed(
            "T0#s#0",
            &["  SET T0_BUF T0#s#0 0 16"]
        )));
        // A read of the source fills only a copy in host memory...
        assert!(has_stale_reread(&seed(
            "T0#s#0",
            &["  GET TCPU_BUF s 0 16"]
        )));
        assert!(!has_stale_reread(&seed(
            "TCPU#s#0",
            &["  GET T0_BUF s 0 16"]
        )));
        // ...and not when it is the eval callback's look at the source.
        assert!(has_stale_reread(&seed(
            "TCPU#s#0",
            &["  SEE s", "  GET T0_BUF s 0 16"]
        )));
        // A fill of another copy, or one before the writer ran, does not count.
        assert!(has_stale_reread(&seed(
            "T0#s#0",
            &["  CPY TCPU_BUF s -> T1_BUF T1#s#0"]
        )));
        let mut early = seed("T0#s#0", &[]);
        early.insert(5, "  CPY TCPU_BUF s -> T0_BUF T0#s#0".to_string());
        assert!(has_stale_reread(&early));
        // No REREAD line, nothing to judge.
        assert!(!has_stale_reread(&seed("T0#s#0", &[])[3..]));
    }
}
