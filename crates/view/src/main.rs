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
    path: Option<PathBuf>,
    /// A/B: side A's file or directory (e.g. run with GGML_SCHED_INPLACE_RULE=0, placed as stock).
    #[arg(long, value_name = "DUMP_A", requires = "b", conflicts_with = "path")]
    a: Option<PathBuf>,
    /// A/B: side B's file or directory.
    #[arg(long, value_name = "DUMP_B", requires = "a")]
    b: Option<PathBuf>,
    /// The page to write (default: target/view/NAME.html).
    #[arg(long, value_name = "FILE")]
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
    let out = cli
        .out
        .unwrap_or_else(|| PathBuf::from("target/view").join(format!("{name}.html")));
    if let Some(d) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    std::fs::write(&out, html.as_bytes()).with_context(|| format!("writing {}", out.display()))?;
    Ok(out)
}

fn main() -> ExitCode {
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
