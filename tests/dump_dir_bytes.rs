//! `GGML_SCHED_DUMP` may name a directory whose path is not UTF-8 text (a Linux path is
//! bytes): it is used, not refused. Its own test binary: the variable is read once per process.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

#[test]
fn a_dump_directory_whose_name_is_not_utf8_is_used() {
    let parent = std::env::temp_dir().join(format!("dump-dir-bytes-{}", std::process::id()));
    let dir = parent.join(OsStr::from_bytes(b"records-\xff\xfe"));
    assert!(
        dir.to_str().is_none(),
        "the test needs a name that is not UTF-8"
    );
    std::env::set_var("GGML_SCHED_DUMP", &dir);
    assert_eq!(ggml_base::sched::record::dir(), Some(dir.as_path()));
    assert!(dir.is_dir(), "the directory is made when missing");
    std::fs::remove_dir_all(&parent).unwrap();
}
