//! Builds everything of `libggml-base.so.0` that is not Rust: the upstream C and C++ sources
//! of the pinned llama.cpp tree (all of stock's `ggml-base` target except `ggml-backend.cpp`
//! and `ggml-alloc.c`, whose 117 functions are implemented in Rust), compiled with exactly the definitions and
//! optimisation flags that the stock CMake build uses; one exception: on x86-64, a GCC older
//! than 13 compiles `ggml-quants.c` with one more flag, which changes no value
//! (`build/gcc.rs` says why).
//!
//! A Rust `cdylib` keeps only the Rust `#[no_mangle]` items global, so the compiled archives
//! are linked with `+whole-archive` and a second version script, generated here from the
//! archives' defined global symbols plus `src/exports.txt`, makes every one of them global
//! again. The SONAME is `libggml-base.so.0`, as stock's.

use std::collections::BTreeSet;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "build/cmake.rs"]
mod cmake;
#[path = "build/gcc.rs"]
mod gcc;
#[path = "build/nm.rs"]
mod nm;

/// Upstream C sources (relative to `ggml/src`), sorted.
/// `ggml-alloc.c` is not among them: its 14 functions are Rust as well (`src/alloc/`).
const C_SOURCES: &[&str] = &["ggml-quants.c", "ggml.c"];
/// The C source compiled in an archive of its own, with `gcc::PEEL_FLAG` where the compiler
/// needs it.
const QUANTS_SOURCE: &str = "ggml-quants.c";
/// The static archives linked whole into the library: C, the quantizers, C++.
const ARCHIVES: &[&str] = &["ggml_base_c", "ggml_base_quants", "ggml_base_cxx"];
/// Upstream C++ sources (relative to `ggml/src`), sorted. `ggml-backend.cpp` is never built.
const CXX_SOURCES: &[&str] = &[
    "ggml-backend-meta.cpp",
    "ggml-opt.cpp",
    "ggml-threading.cpp",
    "ggml.cpp",
    "gguf.cpp",
];
/// Preprocessor definitions of stock's `ggml-base` target (from its compile_commands.json).
const DEFINES: &[(&str, Option<&str>)] = &[
    ("GGML_BUILD", None),
    ("GGML_SCHED_MAX_COPIES", Some("4")),
    ("GGML_SHARED", None),
    ("GGML_USE_OPENMP", None),
    ("_GNU_SOURCE", None),
    ("_XOPEN_SOURCE", Some("600")),
    ("ggml_base_EXPORTS", None),
    ("NDEBUG", None),
];

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-env-changed=DEP_GGML_HEADERS_ROOT");
    println!("cargo:rerun-if-changed=build.rs");
    // The compiler decides the flags of ggml-quants.c (`build/gcc.rs`), and `cc` (told to
    // print no metadata) would not ask for a rebuild when any variable it reads to pick the
    // compiler or its flags changes: name them all.
    let target = env::var("TARGET").unwrap_or_default();
    for var in ["CC", "CXX", "CFLAGS", "CXXFLAGS", "AR"] {
        println!("cargo:rerun-if-env-changed={var}");
        println!("cargo:rerun-if-env-changed=HOST_{var}");
        println!("cargo:rerun-if-env-changed=TARGET_{var}");
        println!("cargo:rerun-if-env-changed={var}_{target}");
        println!(
            "cargo:rerun-if-env-changed={var}_{}",
            target.replace('-', "_")
        );
    }
    println!("cargo:rerun-if-env-changed=RUSTC_WRAPPER");
    let root = env::var_os("DEP_GGML_HEADERS_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "DEP_GGML_HEADERS_ROOT is not set: ggml-sys's build script exports the pinned \
             llama.cpp tree; hint: build through cargo with ggml-sys as a dependency"
            )
        });
    let src = root.join("ggml/src");
    let include = root.join("ggml/include");
    if !src.join("ggml.c").is_file() {
        panic!(
            "the pinned llama.cpp tree at {} lacks ggml/src/ggml.c; hint: run `./ab fetch`",
            root.display()
        );
    }

    // The version and build commit come from pins.toml; the tree must say the same version.
    let pins_path = manifest.join("pins.toml");
    rerun(&pins_path);
    let pins = pins::Pins::load(&manifest).unwrap_or_else(|e| panic!("{e}"));
    let cmake_lists = root.join("ggml/CMakeLists.txt");
    rerun(&cmake_lists);
    let tree_version = fs::read_to_string(&cmake_lists)
        .map_err(|e| e.to_string())
        .and_then(|text| cmake::ggml_version(&text))
        .unwrap_or_else(|e| panic!("{}: {e}", cmake_lists.display()));
    assert_eq!(
        tree_version,
        pins.upstream.ggml_version,
        "the pinned tree at {} is ggml {tree_version}, but pins.toml says ggml_version = {:?}; \
         hint: update ggml_version (and ggml_build_commit) in pins.toml with the pin",
        root.display(),
        pins.upstream.ggml_version
    );

    // ggml-version.h, configured as CMake's configure_file(@ONLY) would.
    let gen = out.join("generated");
    fs::create_dir_all(&gen).unwrap();
    let template_path = src.join("ggml-version.h.in");
    rerun(&template_path);
    let template = fs::read_to_string(&template_path).expect("reading ggml-version.h.in");
    let version_h = template
        .replace("@GGML_VERSION@", &pins.upstream.ggml_version)
        .replace("@GGML_BUILD_COMMIT@", &pins.upstream.ggml_build_commit);
    assert!(
        !version_h.contains('@'),
        "ggml-version.h.in has an @VAR@ this build script does not know: {version_h}"
    );
    write_if_changed(&gen.join("ggml-version.h"), &version_h);

    let base = |cxx: bool| {
        let mut b = cc::Build::new();
        b.cpp(cxx)
            .no_default_flags(true)
            .cargo_metadata(false)
            .warnings(false)
            .include(&src)
            .include(&gen)
            .include(&include)
            .flag("-O3")
            .flag("-fPIC")
            .flag("-fopenmp")
            .flag(if cxx { "-std=gnu++17" } else { "-std=gnu11" });
        for (k, v) in DEFINES {
            b.define(k, *v);
        }
        b
    };
    let mut c = base(false);
    for f in C_SOURCES.iter().filter(|f| **f != QUANTS_SOURCE) {
        c.file(src.join(f));
    }
    let mut quants = base(false);
    quants.file(src.join(QUANTS_SOURCE));
    // Only where it was measured and checked bit for bit (x86-64: no FMA in the baseline, so
    // no contraction the vectorizer could place differently); elsewhere stock's flags.
    let x86_64 = env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "x86_64");
    if x86_64 && old_gcc(&quants) {
        quants.flag(gcc::PEEL_FLAG);
    }
    let mut cxx = base(true);
    for f in CXX_SOURCES {
        cxx.file(src.join(f));
    }
    for f in C_SOURCES.iter().chain(CXX_SOURCES) {
        rerun(&src.join(f));
    }
    // Headers the sources include (our rebuild trigger; the tree is pinned anyway).
    for dir in [&src, &include] {
        let mut headers: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "h"))
            .collect();
        headers.sort();
        for h in headers {
            rerun(&h);
        }
    }
    c.compile("ggml_base_c");
    quants.compile("ggml_base_quants");
    cxx.compile("ggml_base_cxx");

    println!("cargo:rustc-link-search=native={}", out.display());
    for lib in ARCHIVES {
        println!("cargo:rustc-link-lib=static:+whole-archive={lib}");
    }
    println!("cargo:rustc-link-lib=dylib=gomp");
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo:rustc-link-lib=dylib=m");

    // The export list: every defined global of the upstream objects, plus our Rust exports.
    let mut names = BTreeSet::new();
    for lib in ARCHIVES {
        names.extend(defined_globals(&out.join(format!("lib{lib}.a"))));
    }
    let exports_path = manifest.join("src/exports.txt");
    rerun(&exports_path);
    let exports = fs::read_to_string(&exports_path).expect("reading src/exports.txt");
    names.extend(
        exports
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(String::from),
    );
    let mut script = String::from("{\n  global:\n");
    for n in &names {
        writeln!(script, "    \"{n}\";").unwrap();
    }
    script.push_str("  local: *;\n};\n");
    let script_path = out.join("ggml-base.map");
    write_if_changed(&script_path, &script);
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        script_path.display()
    );
    // While a Rust export of src/exports.txt is still being written, the library must link
    // (rust-lld refuses undefined version-script names by default); tests/symbols.rs is what
    // proves that every stock symbol is defined.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--undefined-version");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libggml-base.so.0");
}

/// Whether `build`'s compiler is a GCC older than 13 (`build/gcc.rs`); clang and a compiler
/// whose version cannot be read answer `false`.
fn old_gcc(build: &cc::Build) -> bool {
    let tool = build.get_compiler();
    if !tool.is_like_gnu() || tool.is_like_clang() {
        return false;
    }
    Command::new(tool.path())
        .arg("-dumpversion")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .is_some_and(|o| gcc::gcc_peels_before_vectorizing(&String::from_utf8_lossy(&o.stdout)))
}

fn rerun(p: &Path) {
    println!("cargo:rerun-if-changed={}", p.display());
}

fn write_if_changed(p: &Path, text: &str) {
    if fs::read_to_string(p).ok().as_deref() != Some(text) {
        fs::write(p, text).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
    }
}

/// Names of the defined global symbols (strong, weak and GNU-unique) in the archive `lib`,
/// as `nm --defined-only -g` lists them (C++ names stay mangled).
fn defined_globals(lib: &Path) -> Vec<String> {
    let nm = env::var("NM").unwrap_or_else(|_| "nm".into());
    let output = Command::new(&nm)
        .args(["--defined-only", "-g", "-P"])
        .arg(lib)
        .output()
        .unwrap_or_else(|e| panic!("running {nm}: {e}; hint: install binutils"));
    assert!(
        output.status.success(),
        "{nm} failed on {}: {}",
        lib.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("nm output is not UTF-8");
    nm::parse_nm_posix(&text)
}
