//! `./ab view`: renders `GGML_SCHED_DUMP` records (docs/sched-dump.md) as one self-contained
//! HTML page: the split-level overview laid out by Graphviz, every node with its cause,
//! search by tensor name, the in-place moves highlighted; with `--a` and `--b`, two
//! placements of the same graph side by side with the list of nodes placed differently.
//! See docs/sched-view.md.

mod diff;
mod dot;
mod model;
mod page;
mod style;

use anyhow::{bail, Context, Result};
use clap::Parser;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "view",
    about = "Render GGML_SCHED_DUMP records as a self-contained HTML page",
    after_help = "Examples:\n  ./ab view target/dumps/smollm2\n  ./ab view --a DUMP_RULE_OFF --b DUMP_RULE_ON --out target/view/repro-ab.html"
)]
struct Cli {
    /// A record file or a GGML_SCHED_DUMP directory (every sched-*.json in it).
    #[arg(value_parser = bundle::caller_path_parser())]
    path: Option<PathBuf>,
    /// A/B: side A's file or directory (e.g. run with GGML_SCHED_INPLACE_RULE=0, placed as stock).
    #[arg(long, value_name = "DUMP_A", requires = "b", conflicts_with = "path", value_parser = bundle::caller_path_parser())]
    a: Option<PathBuf>,
    /// A/B: side B's file or directory.
    #[arg(long, value_name = "DUMP_B", requires = "a", value_parser = bundle::caller_path_parser())]
    b: Option<PathBuf>,
    /// The page to write (default: target/view/NAME.html, under the workspace root or the
    /// bundle's folder when run as `ab view`, printed as a full path).
    #[arg(long, value_name = "FILE", value_parser = bundle::caller_path_parser())]
    out: Option<PathBuf>,
    /// The page's title (default: from the input names).
    #[arg(long)]
    title: Option<String>,
    /// How the dumps were made, shown on the page.
    #[arg(long, value_name = "TEXT", default_value = "")]
    command: String,
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .or_else(|| p.file_name())
        .map_or("dump".into(), |s| s.to_string_lossy().into_owned())
}

/// What an A/B page cannot show, said on the terminal too: records of either side left
/// unpaired (no record of the same structure on the other side), and pairs of different
/// structure (one record a side), whose tensors are matched by name only.
fn ab_warnings(ra: &[model::Record], rb: &[model::Record], pairs: &[diff::Pair]) -> Vec<String> {
    let mut out = Vec::new();
    let (ua, ub) = diff::unpaired(ra, rb, pairs);
    for (side, u, n) in [("A", &ua, ra.len()), ("B", &ub, rb.len())] {
        if !u.is_empty() {
            out.push(format!(
                "{} of side {side}'s {n} records have no record of the same structure on the \
                 other side and are not on the page",
                u.len()
            ));
        }
    }
    for p in pairs.iter().filter(|p| !p.same_structure) {
        out.push(format!(
            "{} and {} are different graphs (structure hashes {} and {}): tensors matched by \
             name, {} of A's {} found in B",
            ra[p.a].path.display(),
            rb[p.b].path.display(),
            ra[p.a].graph.structure_hash,
            rb[p.b].graph.structure_hash,
            p.matched,
            p.a_tensors
        ));
    }
    out
}

fn run(cli: Cli) -> Result<PathBuf> {
    let (html, name) = match (&cli.path, &cli.a, &cli.b) {
        (Some(p), None, None) => {
            let recs = model::load(p)?;
            let title = cli
                .title
                .clone()
                .unwrap_or_else(|| format!("Schedule: {}", stem(p)));
            let meta = page::Meta {
                title,
                command: cli.command.clone(),
            };
            (page::render(&meta, &recs, None)?, stem(p))
        }
        (None, Some(a), Some(b)) => {
            let ra = model::load(a)?;
            let rb = model::load(b)?;
            let pairs = diff::pair(&ra, &rb);
            if pairs.is_empty() {
                bail!(
                    "no record of {} has the structure of one of {}: not the same graphs",
                    a.display(),
                    b.display()
                );
            }
            for w in ab_warnings(&ra, &rb, &pairs) {
                eprintln!("[view] note: {w}");
            }
            let title = cli
                .title
                .clone()
                .unwrap_or_else(|| format!("Schedule A/B: {} vs {}", stem(a), stem(b)));
            let meta = page::Meta {
                title,
                command: cli.command.clone(),
            };
            let name = format!("{}-vs-{}", stem(a), stem(b));
            (page::render(&meta, &ra, Some((&rb, &pairs)))?, name)
        }
        _ => bail!("give a FILE or DIR, or both --a and --b (see --help)"),
    };
    // The default is under the folder this runs in (the workspace root or the bundle's
    // folder for `ab view`), which need not be the user's: named absolute, so the line
    // that says where the page is does not read as a path from theirs.
    let out = cli.out.unwrap_or_else(|| {
        let here = std::env::current_dir().unwrap_or_default();
        here.join("target/view").join(format!("{name}.html"))
    });
    if let Some(d) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    std::fs::write(&out, html.as_bytes()).with_context(|| format!("writing {}", out.display()))?;
    Ok(out)
}

fn main() -> ExitCode {
    // First, while this is the only thread: the folder the user's relative paths are taken
    // from (bundle::caller_path), for the arguments parsed below.
    bundle::take_caller_dir();
    match run(Cli::parse()) {
        Ok(p) => {
            let kib = std::fs::metadata(&p).map(|m| m.len() / 1024).unwrap_or(0);
            println!("[view] wrote {} ({kib} KiB)", p.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("[view] error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name)
    }

    /// The in-place reproducer, rule off (stock's placement) against rule on: the records
    /// the HRX run wrote (tests/fixtures, from crates/view/scripts/pages.sh).
    fn repro() -> (Vec<model::Record>, Vec<model::Record>) {
        (
            model::load(&fixture("repro-rule0.json")).unwrap(),
            model::load(&fixture("repro-rule1.json")).unwrap(),
        )
    }

    #[test]
    fn pairs_and_lists_the_nodes_placed_differently() {
        let (a, b) = repro();
        let pairs = diff::pair(&a, &b);
        assert_eq!(pairs.len(), 1);
        assert!(pairs[0].same_structure);
        let got: Vec<_> = pairs[0]
            .differs
            .iter()
            .map(|d| {
                (
                    d.kind,
                    d.name.as_str(),
                    d.a_backend.as_str(),
                    d.a_cause.as_str(),
                    d.b_backend.as_str(),
                    d.b_cause.as_str(),
                    d.b_move.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "node",
                    "mask_fill",
                    "HRX0",
                    "best-in",
                    "CPU",
                    "inplace",
                    Some("HRX0 → CPU (before-fill)")
                ),
                (
                    "node",
                    "mask_set (reshaped)",
                    "HRX0",
                    "view-src",
                    "CPU",
                    "view-src",
                    None
                ),
                ("leaf", "mask_src", "HRX0", "from-dst", "CPU", "from-dst", None),
            ]
        );
        // The writer itself is on the CPU on both sides: not in the list, but on side A it
        // is apart from its storage (the defect), on side B not.
        let w = |r: &model::Record| r.nodes[1].inplace.as_ref().unwrap().same_backend;
        assert!(!w(&a[0]) && w(&b[0]));
    }

    /// The data of a rendered page, parsed as the page's script parses it.
    fn page_data(html: &str) -> serde_json::Value {
        let start = html
            .find("<script type=\"application/json\" id=\"data\">")
            .unwrap();
        let body = &html[start..];
        let json = &body[body.find('>').unwrap() + 1..body.find("</script>").unwrap()];
        serde_json::from_str(json).expect("the page's data is valid JSON")
    }

    /// A `<!--` or `</script>` in the command (or a title, a path, a tensor name) must not
    /// break the page: the embedded data stays JSON that `JSON.parse` reads back unchanged.
    #[test]
    fn markup_in_the_command_keeps_the_data_valid() {
        let (a, _) = repro();
        let command = "make <!-- x --> </script> done";
        let meta = page::Meta {
            title: "<!-- t".into(),
            command: command.into(),
        };
        let html = page::render(&meta, &a, None).unwrap();
        let data = page_data(&html);
        assert_eq!(data["command"], command);
        assert_eq!(data["title"], "<!-- t");
    }

    /// Two dumps whose records do not all pair: the records left out are named (on the
    /// page's data and in the terminal's notes), and a pair of two different graphs says how
    /// many tensors it could match by name, not that every tensor is placed alike.
    #[test]
    fn unpaired_records_and_different_graphs_are_told() {
        let (a, b) = repro();
        // B: the reproducer's record and a record of another graph.
        let mut other = b[0].clone();
        other.graph.structure_hash = "0123456789abcdef".into();
        other.path = PathBuf::from("other.json");
        let b2 = vec![b[0].clone(), other.clone()];
        let pairs = diff::pair(&a, &b2);
        assert_eq!(pairs.len(), 1);
        assert_eq!(diff::unpaired(&a, &b2, &pairs), (vec![], vec![1]));
        let w = ab_warnings(&a, &b2, &pairs);
        assert_eq!(
            w,
            [
                "1 of side B's 2 records have no record of the same structure on the other side \
              and are not on the page"
            ]
        );
        let meta = page::Meta {
            title: "t".into(),
            command: String::new(),
        };
        let data = page_data(&page::render(&meta, &a, Some((&b2, &pairs))).unwrap());
        assert_eq!(data["unpaired"]["b"][0], "other.json");
        assert_eq!(data["unpaired"]["a"].as_array().unwrap().len(), 0);

        // One record a side, of different graphs with no name in common: paired, but
        // nothing matched, and said so.
        for t in other.nodes.iter_mut().chain(other.leafs.iter_mut()) {
            t.name = format!("x{}", t.name);
        }
        let pairs = diff::pair(&a, std::slice::from_ref(&other));
        assert_eq!(pairs.len(), 1);
        assert!(!pairs[0].same_structure);
        assert_eq!(pairs[0].matched, 0);
        assert_eq!(pairs[0].a_tensors, a[0].nodes.len() + a[0].leafs.len());
        let w = ab_warnings(&a, std::slice::from_ref(&other), &pairs);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("are different graphs"), "{}", w[0]);
        assert!(w[0].contains("0 of A's 7 found in B"), "{}", w[0]);
    }

    /// A writer apart from its root's backend but writing host memory its backend can use
    /// (`usable`) is no defect: no dashed red box, no "apart" count, not in the A/B list's
    /// apart mark. Records without the field (older) are judged by `same_backend` alone.
    #[test]
    fn a_usable_host_writer_is_not_flagged() {
        let (a, b) = repro();
        let pal = style::Palette::default();
        let mut ok = a[0].clone();
        ok.nodes[1].inplace.as_mut().unwrap().usable = Some(true);
        assert!(!dot::overview(&ok, &pal)
            .text
            .contains("apart from their storage"));
        let mut unknown = a[0].clone();
        unknown.nodes[1].inplace.as_mut().unwrap().usable = None;
        assert!(dot::overview(&unknown, &pal)
            .text
            .contains("1 writer(s) apart from their storage"));
        // The A/B list: mask_fill (placed differently) is not a writer; make the writer
        // differ and check its mark follows `usable`.
        let mut bb = b[0].clone();
        bb.nodes[1].backend = Some(0);
        let mark = |r: &model::Record| {
            let (_, _, d) = diff::differs(r, &bb);
            d.iter().find(|x| x.name == "mask_set").unwrap().a_apart
        };
        assert!(mark(&unknown));
        assert!(!mark(&ok));
    }

    #[test]
    fn refuses_other_formats_and_versions() {
        let p = Path::new("x.json");
        let e = model::Record::parse(p, r#"{"format":"other","version":1}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "x.json: format 'other', expected 'ggml-sched-dump'"
        );
        let e = model::Record::parse(p, r#"{"format":"ggml-sched-dump","version":2}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "x.json: version 2, this viewer reads version 1"
        );
    }

    /// The page's fast check: the embedded data parses and holds every node and leaf of
    /// both sides, every layout is an SVG that parses as XML with a box per split (and per
    /// node, for these small graphs), and the page's own elements are balanced. Needs
    /// Graphviz's dot (the ./ab script installs it for `view` and `test`).
    #[test]
    fn ab_page_is_self_contained_and_complete() {
        let (a, b) = repro();
        let pairs = diff::pair(&a, &b);
        let meta = page::Meta {
            title: "repro <A/B>".into(),
            command: "x".into(),
        };
        let html = page::render(&meta, &a, Some((&b, &pairs))).unwrap();
        assert!(html.contains("<title>repro &lt;A/B&gt;</title>"));
        // No external assets: nothing is loaded from anywhere.
        for bad in ["src=\"http", "href=\"http", "<link", "@import", "url("] {
            assert!(!html.contains(bad), "{bad}");
        }
        let start = html
            .find("<script type=\"application/json\" id=\"data\">")
            .unwrap();
        let body = &html[start..];
        let json = &body[body.find('>').unwrap() + 1..body.find("</script>").unwrap()];
        let data: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(data["mode"], "ab");
        assert_eq!(data["pairs"][0]["differs"].as_array().unwrap().len(), 3);
        for (side, recs) in [("a", &a), ("b", &b)] {
            let n = data[side][0]["nodes"].as_array().unwrap();
            let names: Vec<_> = n.iter().map(|x| x["name"].as_str().unwrap()).collect();
            let want: Vec<_> = recs[0].nodes.iter().map(|x| x.name.as_str()).collect();
            assert_eq!(names, want);
            assert_eq!(
                data[side][0]["leafs"].as_array().unwrap().len(),
                recs[0].leafs.len()
            );
        }
        // Layouts: overview and nodes, for each side.
        let mut layouts = 0;
        let mut rest = html.as_str();
        while let Some(at) = rest.find("<div class=\"layout\"") {
            let div = &rest[at..];
            let head = &div[..div.find('>').unwrap()];
            let svg = &div[div.find("<svg").unwrap()..div.find("</svg>").unwrap() + 6];
            let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("{head}: {e}"));
            let ids: Vec<&str> = doc
                .descendants()
                .filter(|n| n.attribute("class") == Some("node"))
                .filter_map(|n| n.attribute("id"))
                .collect();
            let rec = if head.contains("data-side=\"a\"") {
                &a[0]
            } else {
                &b[0]
            };
            if head.contains("data-kind=\"overview\"") {
                let want: Vec<String> =
                    rec.splits.iter().map(|s| format!("s{}", s.index)).collect();
                assert_eq!(ids, want, "{head}");
            } else {
                for n in &rec.nodes {
                    assert!(
                        ids.contains(&format!("n{}", n.index).as_str()),
                        "{head}: node {}",
                        n.index
                    );
                }
            }
            layouts += 1;
            rest = &div[6..];
        }
        assert_eq!(layouts, 4);
        for tag in ["div", "main", "header", "script", "style"] {
            let open = html.matches(&format!("<{tag}")).count();
            let close = html.matches(&format!("</{tag}>")).count();
            assert!(
                open >= 1 && open == close,
                "<{tag}>: {open} opened, {close} closed"
            );
        }
    }
}
