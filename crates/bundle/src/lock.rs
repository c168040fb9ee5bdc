//! The locks of the folders the harness writes: one process at a time per folder.

use std::path::Path;

/// Takes the lock of the folder `dir` (creating it): [`lock_file`] of `dir/.lock`.
///
/// Two harness processes writing one folder (two jobs from one bundle, or an `ab exec` of an
/// arm a running `ab ab` uses) would replace each other's library copies and reports while
/// their programs run.
pub fn lock_dir(dir: &Path) -> Result<std::fs::File, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    lock_file(&dir.join(".lock"), dir)
}

/// Takes an exclusive `flock` on the file `path` (created if missing; a symbolic link or
/// anything but a regular file is refused, so no other file is written), held until the
/// returned file is dropped or the process ends (child processes do not inherit it). The
/// file then holds the holder's pid and command line, for the message a second process gets.
/// `what` is the folder or file the lock guards, as the message names it.
///
/// Errors: the lock is held by another process (the message names it and `what`), or the
/// file cannot be opened.
pub fn lock_file(path: &Path, what: &Path) -> Result<std::fs::File, String> {
    match try_lock_file(path)? {
        Locked::Mine(file) => Ok(file),
        Locked::Held(holder) => Err(format!(
            "{} is in use by another harness process ({holder}): wait for it to end, or run \
             this one from another copy of the bundle or workspace",
            what.display()
        )),
    }
}

/// [`lock_file`] that waits while another process holds the lock, for work that may queue
/// behind another harness's (two jobs' ctest runs in one llama.cpp build folder, which
/// rewrite the test models the other's tests map). `waiting` gets the holder's line once,
/// when the wait begins; the lock is then retried every second.
///
/// Errors: as [`lock_file`], except that a held lock is waited for.
pub fn lock_file_waiting(
    path: &Path,
    mut waiting: impl FnMut(&str),
) -> Result<std::fs::File, String> {
    let mut told = false;
    loop {
        match try_lock_file(path)? {
            Locked::Mine(file) => return Ok(file),
            Locked::Held(holder) => {
                if !std::mem::replace(&mut told, true) {
                    waiting(&holder);
                }
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    }
}

/// What one try of the lock gave.
enum Locked {
    /// The lock, now this process's.
    Mine(std::fs::File),
    /// Held by another process, whose line (pid and command) this is.
    Held(String),
}

/// One try of the lock at `path` ([`lock_file`]'s checks and holder line).
fn try_lock_file(path: &Path) -> Result<Locked, String> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => format!(
                "the lock {} is a symbolic link, which it must not be: remove it",
                path.display()
            ),
            _ => format!("opening the lock {}: {e}", path.display()),
        })?;
    // A regular file of its own: the holder's line is written into it, and must not land in
    // a file it shares its data with (a hard link).
    let own = file
        .metadata()
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.is_file() && m.nlink() == 1
        })
        .unwrap_or(false);
    if !own {
        return Err(format!(
            "the lock {} is not a regular file of its own (a folder, a device or a hard \
             link): remove it",
            path.display()
        ));
    }
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Ok(Locked::Held(holder.trim().to_string()));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(format!("locking {}: {e}", path.display()))
        }
    }
    let args: Vec<String> = std::env::args().collect();
    let me = format!("pid {}: {}", std::process::id(), args.join(" "));
    // The holder's name is a courtesy to the next process: failing to write it loses nothing.
    let _ = file
        .set_len(0)
        .and_then(|_| file.rewind())
        .and_then(|_| file.write_all(me.as_bytes()));
    Ok(Locked::Mine(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_has_one_holder_at_a_time() {
        let d = std::env::temp_dir().join(format!("bundle-lock-{}", std::process::id()));
        let held = lock_dir(&d).unwrap();
        // flock conflicts between two opens of the file, in one process as in two.
        let e = lock_dir(&d).unwrap_err();
        assert!(e.contains("in use by another harness process"), "{e}");
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(held);
        let again = lock_dir(&d).unwrap();
        drop(again);
        // A lock that is a link to another file is refused, and that file left as it was.
        let other = d.join("precious");
        std::fs::write(&other, "kept").unwrap();
        std::fs::remove_file(d.join(".lock")).unwrap();
        std::os::unix::fs::symlink(&other, d.join(".lock")).unwrap();
        let e = lock_dir(&d).unwrap_err();
        assert!(e.contains("is a symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "kept");
        std::fs::remove_file(d.join(".lock")).unwrap();
        std::fs::hard_link(&other, d.join(".lock")).unwrap();
        let e = lock_dir(&d).unwrap_err();
        assert!(e.contains("hard link"), "{e}");
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "kept");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A held lock is waited for, the holder named once; it is taken once released.
    #[test]
    fn a_waiting_lock_is_taken_when_released() {
        let d = std::env::temp_dir().join(format!("bundle-lock-wait-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("ctest.lock");
        let held = lock_file(&path, &d).unwrap();
        let started = std::time::Instant::now();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn({
            let path = path.clone();
            move || lock_file_waiting(&path, |holder| tx.send(holder.to_string()).unwrap())
        });
        let holder = rx.recv().unwrap();
        assert!(
            holder.contains(&format!("pid {}", std::process::id())),
            "{holder}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1500));
        assert!(!waiter.is_finished(), "took a held lock");
        drop(held);
        let taken = waiter.join().unwrap().unwrap();
        assert!(started.elapsed() >= std::time::Duration::from_millis(1500));
        assert!(
            rx.try_recv().is_err(),
            "the holder was named more than once"
        );
        drop(taken);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
