//! A harness whose reader went away (`./ab ab ... 2>&1 | head`) ends at its next line, as a
//! command-line tool does, killed by SIGPIPE: it neither goes on without output nor panics
//! (exit 101) at its first failed write.

use std::os::unix::io::FromRawFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

mod common;
use common::root;

#[test]
fn a_closed_output_ends_the_harness_by_sigpipe() {
    let mut fds = [0i32; 2];
    // Close-on-exec: a process that another test thread starts between pipe2 and the drop
    // below would otherwise inherit the read end and keep it open, so the write would not
    // fail (CI saw exit 2 in place of SIGPIPE).
    // SAFETY: `fds` has room for the two descriptors pipe2(2) writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just made by pipe2(2) and are owned here alone.
    let (reader, writer) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    // The reader is gone before the harness writes its first line.
    drop(reader);
    let status = Command::new(env!("CARGO_BIN_EXE_ab"))
        .current_dir(root())
        .arg("store")
        .stdout(Stdio::from(writer.try_clone().unwrap()))
        .stderr(Stdio::from(writer))
        .status()
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}");
}
