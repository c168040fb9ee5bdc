//! Graph layout by Graphviz: the split-level overview of a record (one box per split, in
//! compute order, coloured by backend, with its op count, its input copies and the bytes
//! they move, and the in-place moves it holds) and, for small graphs, every node grouped by
//! split. Each is written in the dot language and laid out by `dot -Tsvg`; the SVG goes
//! inline into the page.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Stdio};

use crate::model::Record;
use crate::style::{fmt_bytes, Palette};

/// Graphs with at most this many nodes also get a node-level layout; bigger ones keep the
/// overview and the searchable node list (a layout of thousands of nodes is neither quick to
/// make nor readable).
pub const NODE_GRAPH_LIMIT: usize = 400;

/// Splits per row of the overview when there are more than two rows of them.
pub const ROW: usize = 4;

/// A layout to make: the graph in the dot language, and the tooltips it refers to.
pub struct Layout {
    /// The graph; each tooltip in it is a placeholder `viewtipN` (see [`tip`]).
    pub text: String,
    /// The tooltips' texts, by N.
    tips: Vec<String>,
}

/// A tooltip, as a placeholder for [`render`] to replace in the SVG. dot expands escapes in a
/// tooltip (`\N` the node's name, `\G` the graph's, `\L` its label) and Graphviz versions
/// differ in how a doubled backslash survives that (2.43 halves it twice), so no escaping in
/// the dot text shows any name literally there; a tooltip does not change the layout, so the
/// text is put into the SVG afterwards, escaped as XML.
fn tip(tips: &mut Vec<String>, text: String) -> String {
    tips.push(text);
    format!("\"viewtip{}\"", tips.len() - 1)
}

/// A control character (U+0000 to U+001F, U+007F) as its symbol of Unicode's Control Pictures
/// block (U+0000 as `␀`): dot refuses a NUL with a syntax error, and a name's newline or tab
/// would otherwise break or shift the label.
fn picture(c: char) -> char {
    match c as u32 {
        n @ 0..=0x1f => char::from_u32(0x2400 + n).unwrap_or('\u{fffd}'),
        0x7f => '\u{2421}',
        _ => c,
    }
}

/// A name from the record (a tensor's, a backend's, an op or a cause) as text to show: every
/// control character, newlines too, as its picture ([`picture`]).
fn lit(s: &str) -> String {
    s.chars().map(picture).collect()
}

/// A string as a dot quoted string, shown as it is: `"` and `\` escaped (a label's escapes
/// such as `\N` or `\l` are then text), `&` as `&amp;` (dot decodes entities such as `&lt;` in
/// labels), `\n` as dot's line break (the labels' own line breaks; a name's have been made
/// pictures by [`lit`]), other control characters as pictures.
fn q(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '&' => o.push_str("&amp;"),
            c => o.push(picture(c)),
        }
    }
    o.push('"');
    o
}

/// Text for an XML attribute value between double quotes.
fn xml_attr(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            c => o.push(picture(c)),
        }
    }
    o
}

/// Graphs with more splits than this get a note before their overview is laid out: dot's
/// layout time grows faster than the number of boxes (here, a chain of one-node splits:
/// 1,001 splits 0.4 s, 2,000 3 s, 4,000 9 s, 10,000 2 min 30 s).
pub const SLOW_SPLITS: usize = 1000;

/// The note to print before laying out `rec`'s overview when that may take long.
pub fn slow_note(rec: &Record) -> Option<String> {
    (rec.splits.len() > SLOW_SPLITS).then(|| {
        format!(
            "{}: {} splits; Graphviz's dot may take minutes to lay out the overview \
             (seconds for 2,000 splits, 2 to 3 minutes for 10,000)",
            rec.path.display(),
            rec.splits.len()
        )
    })
}

/// Where a split input comes from, as an overview box id: the split of the node that
/// produces it, else a box for the leafs (weights, graph inputs) of a backend.
fn producer(rec: &Record, kind: &str, index: Option<usize>, from: Option<usize>) -> String {
    if kind == "node" {
        if let Some(s) = index.and_then(|i| rec.nodes.get(i)).and_then(|n| n.split) {
            return format!("s{s}");
        }
    }
    format!("l{}", from.map_or("x".to_string(), |b| b.to_string()))
}

/// The overview of `rec` in the dot language. Box ids are `s{split}` (`l{backend}` for
/// leafs), which the page's script uses to link a box to its nodes.
pub fn overview(rec: &Record, pal: &Palette) -> Layout {
    let mut d = String::new();
    let mut tips = Vec::new();
    d.push_str("digraph overview {\n");
    d.push_str("  graph [rankdir=TB, nodesep=0.25, ranksep=0.3, bgcolor=\"transparent\", fontname=\"Helvetica\"];\n");
    d.push_str("  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10, margin=\"0.12,0.04\"];\n");
    d.push_str("  edge [fontname=\"Helvetica\", fontsize=9, arrowsize=0.6];\n");
    // Nodes of each split the in-place rule moved, and writers apart from their storage.
    let mut moved = vec![0usize; rec.splits.len()];
    let mut apart = vec![0usize; rec.splits.len()];
    for n in &rec.nodes {
        if let Some(s) = n.split.filter(|&s| s < rec.splits.len()) {
            moved[s] += n.moved.is_some() as usize;
            apart[s] += n.inplace.as_ref().is_some_and(|i| i.apart()) as usize;
        }
    }
    for s in &rec.splits {
        let be = rec.backend_name(Some(s.backend));
        let mut label = format!(
            "#{} {}\n{} ops · nodes {}–{}",
            s.index,
            lit(be),
            s.n_ops,
            s.first_node,
            s.end_node.saturating_sub(1)
        );
        if !s.inputs.is_empty() {
            let _ = write!(
                label,
                "\nin: {} cop{} · {}",
                s.inputs.len(),
                if s.inputs.len() == 1 { "y" } else { "ies" },
                fmt_bytes(s.bytes_in)
            );
        }
        let mut extra = String::new();
        if moved[s.index] > 0 {
            let _ = write!(label, "\n⇄ {} moved by the in-place rule", moved[s.index]);
            extra.push_str(", penwidth=3, color=\"#c2185b\"");
        }
        if apart[s.index] > 0 {
            let _ = write!(
                label,
                "\n⚠ {} writer(s) apart from their storage",
                apart[s.index]
            );
            extra.push_str(", penwidth=3, color=\"#d50000\", style=\"rounded,filled,dashed\"");
        }
        let _ = writeln!(
            d,
            "  s{} [id={}, label={}, fillcolor={}, tooltip={}{}];",
            s.index,
            q(&format!("s{}", s.index)),
            q(&label),
            q(pal.color(be)),
            tip(
                &mut tips,
                format!("split {} on {}: click to list its nodes", s.index, be)
            ),
            extra
        );
    }
    // Copies between boxes, summed per (producer, consumer).
    let mut flows: BTreeMap<(String, usize), (usize, u64)> = BTreeMap::new();
    let mut leaf_boxes: BTreeMap<String, Option<usize>> = BTreeMap::new();
    for s in &rec.splits {
        for i in &s.inputs {
            let p = producer(rec, &i.tensor.kind, i.tensor.index, i.from_backend);
            if p.starts_with('l') {
                leaf_boxes.insert(p.clone(), i.from_backend);
            }
            let e = flows.entry((p, s.index)).or_default();
            e.0 += 1;
            e.1 += i.bytes;
        }
    }
    for (id, b) in &leaf_boxes {
        let be = rec.backend_name(*b);
        let _ = writeln!(
            d,
            "  {id} [id={}, shape=cylinder, style=filled, label={}, fillcolor={}];",
            q(id),
            q(&format!("leafs on {}\n(weights, inputs)", lit(be))),
            q(pal.color(be))
        );
    }
    // The compute order: a heavy edge from each split to the next keeps the bands in order.
    // Many splits go in rows of [ROW] (left to right, row after row), so that a graph of
    // hundreds of splits is a block to look at, not a column to scroll.
    let snake = rec.splits.len() > 2 * ROW;
    if snake {
        for row in rec.splits.chunks(ROW) {
            let ids: Vec<String> = row.iter().map(|s| format!("s{}", s.index)).collect();
            let _ = writeln!(d, "  {{ rank=same; {}; }}", ids.join("; "));
        }
    }
    for (k, w) in rec.splits.windows(2).enumerate() {
        let (a, b) = (w[0].index, w[1].index);
        // In rows, the step to the next row must not pull that row under this one's end
        // (a staircase); invisible edges down the columns align the rows instead.
        let weight = if snake && (k + 1) % ROW == 0 { 0 } else { 20 };
        if snake && k + ROW < rec.splits.len() {
            let _ = writeln!(
                d,
                "  s{a} -> s{} [style=invis, weight=5];",
                rec.splits[k + ROW].index
            );
        }
        match flows.remove(&(format!("s{a}"), b)) {
            Some((n, bytes)) => {
                let _ = writeln!(
                    d,
                    "  s{a} -> s{b} [weight={weight}, penwidth=1.6, label={}];",
                    q(&format!("{n} · {}", fmt_bytes(bytes)))
                );
            }
            None => {
                let _ = writeln!(
                    d,
                    "  s{a} -> s{b} [weight={weight}, color=\"#bbbbbb\", arrowhead=none];"
                );
            }
        }
    }
    for ((p, c), (n, bytes)) in flows {
        let constraint = if p.starts_with('l') && !snake {
            "true"
        } else {
            "false"
        };
        let _ = writeln!(
            d,
            "  {p} -> s{c} [constraint={constraint}, color=\"#666666\", style=dashed, label={}];",
            q(&format!("{n} · {}", fmt_bytes(bytes)))
        );
    }
    d.push_str("}\n");
    Layout { text: d, tips }
}

/// Every node of a small graph (at most [`NODE_GRAPH_LIMIT`]), grouped by split, coloured by
/// backend; leafs as small boxes; reads through a split-input copy dashed; in-place moves
/// with a thick border. `None` for bigger graphs. Node ids are `n{index}`, leafs `f{index}`.
pub fn nodes(rec: &Record, pal: &Palette) -> Option<Layout> {
    if rec.nodes.len() + rec.leafs.len() > NODE_GRAPH_LIMIT {
        return None;
    }
    let mut d = String::new();
    let mut tips = Vec::new();
    d.push_str("digraph nodes {\n");
    d.push_str("  graph [rankdir=TB, nodesep=0.2, ranksep=0.3, bgcolor=\"transparent\", fontname=\"Helvetica\", fontsize=10];\n");
    d.push_str("  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=9, margin=\"0.06,0.02\", height=0.3];\n");
    d.push_str("  edge [arrowsize=0.5, color=\"#777777\"];\n");
    let raw_nodes = rec.raw["nodes"].as_array();
    for s in &rec.splits {
        let be = rec.backend_name(Some(s.backend));
        let _ = writeln!(
            d,
            "  subgraph cluster_{} {{ label={}; style=\"rounded\"; color={};",
            s.index,
            q(&format!("split #{} · {}", s.index, lit(be))),
            q(pal.color(be))
        );
        for n in rec.nodes.iter().filter(|n| n.split == Some(s.index)) {
            let be = rec.backend_name(n.backend);
            let mut extra = String::new();
            if n.moved.is_some() {
                extra.push_str(", penwidth=3, color=\"#c2185b\"");
            }
            if n.inplace.as_ref().is_some_and(|i| i.apart()) {
                extra.push_str(", penwidth=3, color=\"#d50000\", style=\"rounded,filled,dashed\"");
            }
            let shape = if n.is_view {
                ", shape=ellipse, fontsize=8"
            } else {
                ""
            };
            let _ = writeln!(
                d,
                "    n{} [id={}, label={}, fillcolor={}, tooltip={}{shape}{extra}];",
                n.index,
                q(&format!("n{}", n.index)),
                q(&format!(
                    "{}\n{} · {}",
                    lit(&n.name),
                    lit(&n.op),
                    lit(n.cause.as_deref().unwrap_or("-"))
                )),
                q(pal.color(be)),
                tip(&mut tips, format!("#{} {} on {}", n.index, n.name, be))
            );
        }
        d.push_str("  }\n");
    }
    for l in &rec.leafs {
        let be = rec.backend_name(l.backend);
        let _ = writeln!(
            d,
            "  f{} [id={}, shape=note, style=filled, fontsize=8, label={}, fillcolor={}];",
            l.index,
            q(&format!("f{}", l.index)),
            q(&lit(&l.name)),
            q(pal.color(be))
        );
    }
    for (i, n) in raw_nodes.into_iter().flatten().enumerate() {
        for s in n["srcs"].as_array().into_iter().flatten() {
            let t = &s["tensor"];
            let Some(j) = t["index"].as_u64() else {
                continue;
            };
            let from = match t["kind"].as_str() {
                Some("node") => format!("n{j}"),
                Some("leaf") => format!("f{j}"),
                _ => continue,
            };
            let style = if s["via_copy"].as_bool() == Some(true) {
                " [style=dashed, color=\"#d50000\"]"
            } else {
                ""
            };
            let _ = writeln!(d, "  {from} -> n{i}{style};");
        }
    }
    d.push_str("}\n");
    Some(Layout { text: d, tips })
}

/// Lays out `layout` with Graphviz's `dot` and returns the `<svg>` element (the XML
/// prologue and doctype removed, so it can go inline into HTML), its tooltips put in.
pub fn render(layout: &Layout) -> Result<String> {
    let dot_text = &layout.text;
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context(
            "running Graphviz `dot` (Debian package graphviz; `./ab view` installs it when \
             missing)",
        )?;
    let mut stdin = child.stdin.take().context("dot's stdin")?;
    let text = dot_text.to_string();
    // Written from another thread: dot may fill its output pipe before it has read all.
    let writer = std::thread::spawn(move || stdin.write_all(text.as_bytes()));
    let out = child.wait_with_output().context("waiting for dot")?;
    let written = writer
        .join()
        .map_err(|_| anyhow::anyhow!("writing to dot panicked"))?;
    // dot's own complaint first: a dot that stops reading at a syntax error makes the write
    // fail with a broken pipe, which says nothing of why.
    if !out.status.success() {
        bail!(
            "dot failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    written.context("writing to dot")?;
    let svg = String::from_utf8(out.stdout).context("dot's SVG is not UTF-8")?;
    let at = svg.find("<svg").context("dot printed no <svg> element")?;
    Ok(put_tips(&svg[at..], &layout.tips))
}

/// `svg` with each tooltip placeholder `xlink:title="viewtipN"` replaced by tooltip N as XML
/// text. The pattern cannot come from a label: dot writes a label's `"` as `&quot;`.
fn put_tips(svg: &str, tips: &[String]) -> String {
    const PAT: &str = "xlink:title=\"viewtip";
    let mut out = String::with_capacity(svg.len());
    let mut rest = svg;
    while let Some(at) = rest.find(PAT) {
        let after = &rest[at + PAT.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let tip = after[..digits]
            .parse::<usize>()
            .ok()
            .filter(|_| after[digits..].starts_with('"'))
            .and_then(|n| tips.get(n));
        match tip {
            Some(t) => {
                out.push_str(&rest[..at]);
                out.push_str("xlink:title=\"");
                out.push_str(&xml_attr(t));
                rest = &after[digits..];
            }
            None => {
                out.push_str(&rest[..at + PAT.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Split;

    #[test]
    fn dots_own_message_is_reported_when_it_stops_reading() {
        if Command::new("dot").arg("-V").output().is_err() {
            eprintln!("no Graphviz dot here: nothing to check");
            return;
        }
        // a quoted string longer than dot's 16384-byte limit, then enough text to fill the pipe
        let text = format!(
            "digraph g {{ a [label=\"{}\"]; {} }}",
            "x".repeat(1 << 20),
            "b -> c; ".repeat(1 << 16)
        );
        let layout = Layout { text, tips: vec![] };
        let e = format!("{:#}", render(&layout).unwrap_err());
        assert!(e.starts_with("dot failed"), "{e}");
        assert!(!e.contains("Broken pipe"), "{e}");
    }

    #[test]
    fn quoting() {
        assert_eq!(q("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
        // `&` as an entity (dot decodes `&lt;` in a label), control characters as pictures
        // (a NUL is a syntax error to dot), a name's newline too.
        assert_eq!(q("&lt;&#60;&amp;2"), "\"&amp;lt;&amp;#60;&amp;amp;2\"");
        assert_eq!(q("a\0b\tc\x7f"), "\"a\u{2400}b\u{2409}c\u{2421}\"");
        assert_eq!(q(&lit("x\ny")), "\"x\u{240a}y\"");
        assert_eq!(
            xml_attr("<a href=\"x\">&\0"),
            "&lt;a href=&quot;x&quot;&gt;&amp;\u{2400}"
        );
    }

    fn fixture() -> Record {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/repro-rule1.json");
        Record::read(&p).unwrap()
    }

    /// Names that dot would read as entities (`&lt;`), as escapes (`\N` the node's name, `\G`
    /// the graph's, `\L` the label, `\l` a line break) or that it refuses (NUL) are drawn
    /// as they are, in the labels and in the tooltips of both layouts.
    /// The text of every `<text>` element of an SVG page, and every link title (tooltip).
    fn texts_and_titles(svg: &str) -> (Vec<String>, Vec<String>) {
        let doc = roxmltree::Document::parse(svg).unwrap();
        let texts = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text().map(str::to_string))
            .collect();
        let titles = doc
            .descendants()
            .filter_map(|n| n.attribute(("http://www.w3.org/1999/xlink", "title")))
            .map(str::to_string)
            .collect();
        (texts, titles)
    }

    #[test]
    fn names_are_shown_literally() {
        if Command::new("dot").arg("-V").output().is_err() {
            eprintln!("no Graphviz dot here: nothing to check");
            return;
        }
        let mut rec = fixture();
        let names = [
            "&lt;&#60;&amp;2",
            "\\N\\G\\L\\l4 x\\\\y\\",
            "nul\0tab\tnl\nq\"e",
        ];
        for (n, name) in rec.nodes.iter_mut().zip(names) {
            n.name = name.into();
        }
        rec.leafs[0].name = "leaf&amp;\\E".into();
        rec.backends[0].name = "B&lt;\\G".into();
        let shown = |s: &str| {
            s.replace('\0', "\u{2400}")
                .replace('\t', "\u{2409}")
                .replace('\n', "\u{240a}")
        };
        let pal = Palette::default();

        let svg = render(&nodes(&rec, &pal).unwrap()).unwrap();
        let (texts, titles) = texts_and_titles(&svg);
        let (texts, titles): (Vec<&str>, Vec<&str>) = (
            texts.iter().map(String::as_str).collect(),
            titles.iter().map(String::as_str).collect(),
        );
        for (i, name) in names.iter().enumerate() {
            assert!(
                texts.contains(&shown(name).as_str()),
                "{name:?} not in {texts:?}"
            );
            let tip = format!("#{i} {} on CPU", shown(name));
            assert!(titles.contains(&tip.as_str()), "{tip:?} not in {titles:?}");
        }
        assert!(titles.contains(&"#3 out on B&lt;\\G"), "{titles:?}");
        assert!(texts.contains(&"leaf&amp;\\E"), "{texts:?}");
        assert!(texts.contains(&"split #1 · B&lt;\\G"), "{texts:?}");

        let svg = render(&overview(&rec, &pal)).unwrap();
        let (texts, titles) = texts_and_titles(&svg);
        let (texts, titles): (Vec<&str>, Vec<&str>) = (
            texts.iter().map(String::as_str).collect(),
            titles.iter().map(String::as_str).collect(),
        );
        assert!(texts.contains(&"#1 B&lt;\\G"), "{texts:?}");
        assert!(
            titles.contains(&"split 1 on B&lt;\\G: click to list its nodes"),
            "{titles:?}"
        );
    }

    /// Only a graph of more than [`SLOW_SPLITS`] splits gets the note that its layout may
    /// take minutes.
    #[test]
    fn a_big_overview_is_announced() {
        let mut rec = fixture();
        let split = rec.splits[0].clone();
        rec.splits = (0..SLOW_SPLITS)
            .map(|i| Split {
                index: i,
                ..split.clone()
            })
            .collect();
        assert_eq!(slow_note(&rec), None);
        rec.splits.push(Split {
            index: SLOW_SPLITS,
            ..split
        });
        assert_eq!(
            slow_note(&rec).unwrap(),
            format!(
                "{}: 1001 splits; Graphviz's dot may take minutes to lay out the overview \
                 (seconds for 2,000 splits, 2 to 3 minutes for 10,000)",
                rec.path.display()
            )
        );
    }
}
