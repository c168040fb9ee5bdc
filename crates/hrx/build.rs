//! Generates the table of op names (`OP_NAMES`, indexed by `enum ggml_op`) from the pinned
//! `ggml.h`, so that `GGML_HRX_EAGER_OPS` can be parsed without calling into libggml-base
//! (unit tests run without it). The tree comes from `ggml-sys` (`DEP_GGML_HEADERS_ROOT`).

use std::env;
use std::fs;
use std::path::PathBuf;

fn main() {
    let root = env::var("DEP_GGML_HEADERS_ROOT")
        .expect("DEP_GGML_HEADERS_ROOT is unset: ggml-sys must be a dependency");
    let header = PathBuf::from(&root).join("ggml/include/ggml.h");
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rerun-if-changed=build.rs");
    let text =
        fs::read_to_string(&header).unwrap_or_else(|e| panic!("reading {}: {e}", header.display()));
    let start = text
        .find("enum ggml_op {")
        .expect("enum ggml_op not found in ggml.h");
    let body = &text[start..];
    let end = body.find("};").expect("end of enum ggml_op");
    let mut names = Vec::new();
    for line in body[..end].lines().skip(1) {
        let item = line.trim().trim_end_matches(',');
        let item = item.split("//").next().unwrap_or("").trim();
        if let Some(name) = item.strip_prefix("GGML_OP_") {
            let name = name.split('=').next().unwrap_or("").trim();
            if name == "COUNT" {
                break;
            }
            names.push(name.to_string());
        }
    }
    assert!(names.len() > 50, "parsed too few ops from ggml.h");
    let mut out = String::from("/// Op names in `enum ggml_op` order, from the pinned ggml.h.\npub const OP_NAMES: &[&str] = &[\n");
    for n in &names {
        out.push_str(&format!("    \"{n}\",\n"));
    }
    out.push_str("];\n");
    let dest = PathBuf::from(env::var("OUT_DIR").unwrap()).join("op_names.rs");
    fs::write(dest, out).expect("writing op_names.rs");
}
