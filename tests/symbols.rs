//! Our `libggml-base.so.0` exports every dynamic symbol that the stock one of the pinned
//! llama.cpp build exports. The one allowed difference: weak C++ template instantiations that
//! stock only has because `ggml-backend.cpp` (which we do not compile) instantiated them; each
//! of those must demangle to a `std::` template instantiation, never a ggml API symbol.
//!
//! Needs the stock build at `target/llama-stock/bin/libggml-base.so.0` (fails without it) and
//! `nm` and `c++filt` from binutils.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

#[path = "common/libs.rs"]
mod libs;
use libs::{our_lib, stock_lib};

/// Defined dynamic symbols of `lib`: name -> nm type letter.
fn dynamic_symbols(lib: &Path) -> BTreeMap<String, char> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only", "-P"])
        .arg(lib)
        .output()
        .expect("running nm (install binutils)");
    assert!(
        out.status.success(),
        "nm -D failed on {}: {}",
        lib.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let name = it.next()?;
            let ty = it.next()?.chars().next()?;
            Some((name.to_string(), ty))
        })
        .collect()
}

fn demangle(name: &str) -> String {
    let out = Command::new("c++filt")
        .arg(name)
        .output()
        .expect("running c++filt (install binutils)");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn every_stock_symbol_is_exported() {
    let stock_lib = stock_lib();
    assert!(
        stock_lib.is_file(),
        "the stock build is missing: {} (build it with the harness first)",
        stock_lib.display()
    );
    let ours_lib = our_lib();
    assert!(
        ours_lib.is_file(),
        "our library is missing: {}",
        ours_lib.display()
    );
    let stock = dynamic_symbols(&stock_lib);
    let ours = dynamic_symbols(&ours_lib);
    assert!(
        stock.len() > 800,
        "suspiciously few stock symbols: {}",
        stock.len()
    );

    let mut missing_api = Vec::new();
    let mut allowed_templates = Vec::new();
    for (name, &ty) in &stock {
        if ours.contains_key(name) {
            continue;
        }
        let demangled = demangle(name);
        // A weak C++ instantiation of a standard-library template: mangled, weak in stock,
        // and demangling to `std::...` with template arguments.
        let is_std_template = name.starts_with("_Z")
            && matches!(ty, 'W' | 'V')
            && demangled.starts_with("std::")
            && demangled.contains('<');
        if is_std_template {
            allowed_templates.push(format!("{name}\n    = {demangled}"));
        } else {
            missing_api.push(format!("{name} ({ty}) = {demangled}"));
        }
    }
    eprintln!(
        "stock exports {}, ours {}; {} weak std:: template instantiations of ggml-backend.cpp \
         are not ours to export:\n  {}",
        stock.len(),
        ours.len(),
        allowed_templates.len(),
        allowed_templates.join("\n  ")
    );
    assert!(
        missing_api.is_empty(),
        "{} stock symbols are missing from {}:\n  {}",
        missing_api.len(),
        ours_lib.display(),
        missing_api.join("\n  ")
    );
    // Nothing beyond stock's set is exported either (no Rust internals leak out).
    let extra: Vec<&String> = ours.keys().filter(|n| !stock.contains_key(*n)).collect();
    assert!(
        extra.is_empty(),
        "exported by ours but not by stock: {extra:?}"
    );
    // None of the 117 names of src/exports.txt may be among the allowed differences.
    let exports =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/exports.txt"))
            .unwrap();
    let names: Vec<&str> = exports
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        names.len(),
        117,
        "src/exports.txt lists the 103 functions of stock ggml-backend.cpp and the 14 of ggml-alloc.c"
    );
    for n in names {
        assert_eq!(
            ours.get(n),
            Some(&'T'),
            "{n} must be a defined function in our library"
        );
    }
}

#[test]
fn soname_and_needed_match_stock() {
    let ours_lib = our_lib();
    let out = Command::new("readelf")
        .arg("-d")
        .arg(&ours_lib)
        .output()
        .expect("running readelf");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Library soname: [libggml-base.so.0]"),
        "SONAME: {text}"
    );
    for lib in [
        "libgomp.so.1",
        "libstdc++.so.6",
        "libm.so.6",
        "libgcc_s.so.1",
        "libc.so.6",
    ] {
        assert!(
            text.contains(&format!("Shared library: [{lib}]")),
            "{lib} not in DT_NEEDED: {text}"
        );
    }
}
