//! The parsers the build script relies on (`build/*.rs`), tested on inputs shaped like the
//! real ones: a wrong export list or version would otherwise only show as a link or symbol
//! parity failure far from its cause.

#[path = "../build/cmake.rs"]
mod cmake;
#[path = "../build/gcc.rs"]
mod gcc;
#[path = "../build/nm.rs"]
mod nm;

#[test]
fn gcc_older_than_13_gets_the_peel_flag() {
    // `gcc -dumpversion` prints the major version (GCC 7 on), older ones the full version
    for (v, peels) in [
        ("12\n", true),
        ("11", true),
        ("4.9.2", true),
        ("13", false),
        ("14\n", false),
        ("13.3.0", false),
        ("", false),
        ("clang", false),
    ] {
        assert_eq!(gcc::gcc_peels_before_vectorizing(v), peels, "{v:?}");
    }
    assert!(gcc::PEEL_FLAG.starts_with("--param="));
}

#[test]
fn nm_keeps_defined_globals_only() {
    let text = "\
libggml_base_c.a[ggml.c.o]:
ggml_init T 0000000000001230 00000000000000f0
ggml_abort T 0000000000000010 0000000000000080
g_state b 0000000000000000 0000000000000100
memcpy U
ggml_table_f32_f16 B 0000000000000000 0000000000040000
__cxa_pure_virtual w
_ZN4gguf3getEv W 0000000000000000 0000000000000010
_ZGVZ4funcvE1x u 0000000000000000 0000000000000008
ggml_local_helper t 0000000000000040 0000000000000020
ggml_version_string R 0000000000000000 0000000000000006
";
    assert_eq!(
        nm::parse_nm_posix(text),
        [
            "ggml_init",
            "ggml_abort",
            "ggml_table_f32_f16",
            "_ZN4gguf3getEv",
            "_ZGVZ4funcvE1x",
            "ggml_version_string"
        ]
    );
}

#[test]
fn nm_ignores_member_headers_and_short_lines() {
    assert!(nm::parse_nm_posix("libx.a[a.o]: T\n\nlonely\n").is_empty());
}

#[test]
fn cmake_version_of_ggml() {
    let text = "cmake_minimum_required(VERSION 3.14)\nproject(\"ggml\" C CXX)\n\
                set(GGML_VERSION_MAJOR 0)\nset(GGML_VERSION_MINOR 25)\n  set(GGML_VERSION_PATCH 3)\n\
                set(GGML_VERSION_BASE \"${GGML_VERSION_MAJOR}.${GGML_VERSION_MINOR}\")\n";
    assert_eq!(cmake::ggml_version(text).as_deref(), Ok("0.25.3"));
}

#[test]
fn cmake_version_errors_name_the_part() {
    let missing = "set(GGML_VERSION_MAJOR 0)\nset(GGML_VERSION_MINOR 25)\n";
    assert_eq!(
        cmake::ggml_version(missing),
        Err("no `set(GGML_VERSION_PATCH N)` line".to_string())
    );
    let bad = "set(GGML_VERSION_MAJOR 0)\nset(GGML_VERSION_MINOR x)\nset(GGML_VERSION_PATCH 3)\n";
    assert_eq!(
        cmake::ggml_version(bad),
        Err("GGML_VERSION_MINOR is \"x\", not a number".to_string())
    );
}

/// The pinned tree, when fetched, states the version pins.toml names (what build.rs checks).
#[test]
fn pinned_tree_matches_pins_toml() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let pins = pins::Pins::load(root).unwrap();
    let cache = std::env::var_os("GGML_AB_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let lists = pins.upstream_dir(&cache).join("ggml/CMakeLists.txt");
    let text = std::fs::read_to_string(&lists)
        .unwrap_or_else(|e| panic!("{}: {e} (run ./ab fetch)", lists.display()));
    assert_eq!(
        cmake::ggml_version(&text).unwrap(),
        pins.upstream.ggml_version
    );
}
