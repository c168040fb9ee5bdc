//! `take_caller_dir` reads `AB_CALLER_DIR` once and removes it, so that what the process
//! starts in turn is not told a folder it was not called from. Alone in its test binary:
//! the folder is read once per process, and the environment is changed.

use std::path::Path;

#[test]
fn the_callers_folder_is_read_once_and_not_passed_on() {
    std::env::set_var(bundle::CALLER_DIR_VAR, "/some/caller");
    assert_eq!(bundle::take_caller_dir(), Some(Path::new("/some/caller")));
    assert_eq!(std::env::var_os(bundle::CALLER_DIR_VAR), None);
    // Still known to this process, and handed on only when asked for.
    assert_eq!(bundle::caller_dir(), Some(Path::new("/some/caller")));
    assert_eq!(
        bundle::caller_path(Path::new("m.gguf")),
        Path::new("/some/caller/m.gguf")
    );
    let (var, dir) = bundle::caller_env().unwrap();
    assert_eq!(
        (var, dir.as_os_str()),
        ("AB_CALLER_DIR", "/some/caller".as_ref())
    );
    // A child does not inherit it.
    let out = std::process::Command::new("sh")
        .args(["-c", "echo \"${AB_CALLER_DIR-unset}\""])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "unset");
}
