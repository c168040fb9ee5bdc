//! The page: one HTML file with everything inline (style, script, the records as JSON, the
//! SVG layouts), so it opens from disk with no network and no other file.

use anyhow::{Context, Result};
use serde_json::json;

use crate::diff::Pair;
use crate::dot;
use crate::model::Record;
use crate::style::Palette;

const CSS: &str = include_str!("../assets/view.css");
const JS: &str = include_str!("../assets/view.js");

/// What the page shows besides the records.
pub struct Meta {
    /// The page title.
    pub title: String,
    /// How the dumps were made, shown verbatim (may be empty).
    pub command: String,
}

/// Text for inside a `<script>` element: no `</` (which would end it) and no `<!--`.
fn script_safe(s: &str) -> String {
    s.replace("</", "<\\/").replace("<!--", "<\\!--")
}

/// JSON text for inside a `<script type="application/json">` element: every `<` (which in
/// JSON text only occurs inside strings) as the escape `\u003c`, so neither `</script>` nor
/// `<!--` can appear, and the text stays valid JSON (`<\!--` would not be: `\!` is no JSON
/// escape, and the page's `JSON.parse` would throw).
fn json_script_safe(s: &str) -> String {
    s.replace('<', "\\u003c")
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The layouts of one side's records, as hidden `<div>`s the script moves into view.
fn layouts(side: &str, recs: &[Record], pal: &Palette, out: &mut String) -> Result<()> {
    for (i, r) in recs.iter().enumerate() {
        if let Some(note) = dot::slow_note(r) {
            eprintln!("[view] note: {note}");
        }
        let svg = dot::render(&dot::overview(r, pal))
            .with_context(|| format!("laying out the overview of {}", r.path.display()))?;
        out.push_str(&format!(
            "<div class=\"layout\" data-side=\"{side}\" data-rec=\"{i}\" data-kind=\"overview\">{svg}</div>\n"
        ));
        if let Some(d) = dot::nodes(r, pal) {
            let svg = dot::render(&d)
                .with_context(|| format!("laying out the nodes of {}", r.path.display()))?;
            out.push_str(&format!(
                "<div class=\"layout\" data-side=\"{side}\" data-rec=\"{i}\" data-kind=\"nodes\">{svg}</div>\n"
            ));
        }
    }
    Ok(())
}

/// The whole page for side A's records (and, in an A/B page, side B's with their pairs).
pub fn render(meta: &Meta, a: &[Record], b: Option<(&[Record], &[Pair])>) -> Result<String> {
    let mut pal = Palette::default();
    for r in a.iter().chain(b.iter().flat_map(|(r, _)| r.iter())) {
        pal.add(r.backends.iter().map(|x| (x.name.as_str(), x.cpu)));
    }
    let side = |recs: &[Record]| -> Vec<serde_json::Value> {
        recs.iter()
            .map(|r| {
                let mut v = r.raw.clone();
                v["_file"] = json!(r.path.display().to_string());
                v
            })
            .collect()
    };
    let data = json!({
        "mode": if b.is_some() { "ab" } else { "single" },
        "title": meta.title,
        "command": meta.command,
        "palette": pal.all(),
        "node_graph_limit": dot::NODE_GRAPH_LIMIT,
        "a": side(a),
        "b": b.map(|(r, _)| side(r)).unwrap_or_default(),
        "pairs": b.map(|(_, p)| serde_json::to_value(p).unwrap_or_default()).unwrap_or_default(),
        // Records of either side that no pair holds (not shown): their files.
        "unpaired": b.map(|(rb, p)| {
            let (ua, ub) = crate::diff::unpaired(a, rb, p);
            let files = |recs: &[Record], ix: Vec<usize>| -> Vec<String> {
                ix.into_iter().map(|i| recs[i].path.display().to_string()).collect()
            };
            json!({"a": files(a, ua), "b": files(rb, ub)})
        }),
    });
    let mut svgs = String::new();
    layouts("a", a, &pal, &mut svgs)?;
    if let Some((rb, _)) = b {
        layouts("b", rb, &pal, &mut svgs)?;
    }
    let title = esc(&meta.title);
    Ok(format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title>\n<style>\n{CSS}</style></head>\n\
         <body data-ready=\"0\" data-errors=\"0\">\n\
         <header><h1>{title}</h1><div id=\"notes\"></div></header>\n\
         <main id=\"app\"><noscript>This page needs JavaScript for the node list; the \
         layouts below are plain SVG.</noscript></main>\n\
         <div id=\"layouts\" hidden>\n{svgs}</div>\n\
         <script type=\"application/json\" id=\"data\">{}</script>\n\
         <script>\n{}</script>\n</body></html>\n",
        json_script_safe(&data.to_string()),
        script_safe(JS)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_text_cannot_close_the_element() {
        assert_eq!(script_safe("a</script>b<!--"), "a<\\/script>b<\\!--");
        assert_eq!(esc("<a href=\"x\">&"), "&lt;a href=&quot;x&quot;&gt;&amp;");
    }

    /// A `<!--` or `</script>` in a string of the data (a command, a title, a tensor name, a
    /// path) must neither end the element nor make the JSON invalid.
    #[test]
    fn data_with_markup_stays_valid_json() {
        let v = json!({"command": "make <!-- x --> </script> <b>"});
        let text = json_script_safe(&v.to_string());
        assert!(!text.contains('<'), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v);
    }

    /// `#rec=K` and `#pair=K` of the page's address: an index below 0 or not a whole number
    /// (which left the page blank) is 0, one past the end the last. The script's own
    /// function, run by Node.js where it is installed.
    #[test]
    fn the_address_index_is_clamped_both_ways() {
        if std::process::Command::new("node")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("no Node.js here: nothing to check");
            return;
        }
        let f = JS
            .lines()
            .find(|l| l.trim_start().starts_with("function hashIndex("))
            .expect("view.js defines hashIndex on one line");
        let cases = [
            ("-1", 3),
            ("-2", 1),
            ("abc", 3),
            ("1.5", 3),
            ("", 3),
            ("1", 3),
            ("7", 3),
            ("0", 1),
            ("2", 0),
        ];
        let calls: Vec<String> = cases
            .iter()
            .map(|(v, n)| format!("hashIndex({}, {n})", serde_json::json!(v)))
            .collect();
        let script = format!("{f}\nconsole.log(JSON.stringify([{}]));", calls.join(", "));
        let out = std::process::Command::new("node")
            .args(["-e", &script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got: Vec<i64> = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(got, [0, 0, 0, 0, 0, 1, 2, 0, 0]);
    }
}
