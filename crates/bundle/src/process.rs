//! What the processes the harness starts need: paths the dynamic loader reads whole, and an
//! end with the harness.

use std::path::Path;

/// Makes the process `cmd` starts get SIGTERM when the thread that starts it ends: the
/// harness's children go when it goes, even killed by a signal no cleanup of ours sees
/// (SIGKILL). Such a child would go on using an arm's folder whose lock has passed to the
/// next job, or keep a port. Start the child from a thread that outlives it (one that waits
/// for it). Only the child itself is covered; [`GroupGuard`] covers what it starts in turn.
pub fn die_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure only calls prctl, which is
    // async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Takes a process group down with the harness: a process forked from the harness, in a
/// session of its own (so a signal to the harness's group, a closed terminal's SIGHUP, does
/// not take it down with the harness), that polls every 100 ms, kills the group `pgid` with
/// SIGKILL once the harness is gone (its parent changes), and ends by itself once the group
/// is empty. [`die_with_parent`] covers a child only; this covers what the child starts in
/// turn (ctest's tests, a script's programs), which a SIGKILL of the harness would otherwise
/// leave running. Dropping it (the run over, or the harness unwinding from a panic) kills
/// what is left of the group and ends the watch.
pub struct GroupGuard {
    pid: libc::pid_t,
    pgid: libc::pid_t,
}

/// Tests make the guard close its descriptors one by one, as it does where close_range(2) is
/// missing, to check that path on a kernel that has it.
#[cfg(test)]
static CLOSE_LOOP_FORCED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the guard must take the one-by-one path (tests only; an atomic load, which the
/// forked guard may make).
fn close_loop_forced() -> bool {
    #[cfg(test)]
    return CLOSE_LOOP_FORCED.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(test))]
    false
}

impl GroupGuard {
    /// Starts the watch of the process group `pgid` (a child started with a group of its own:
    /// `Command::process_group(0)`, so its pid). Errors: `fork` failed.
    pub fn start(pgid: libc::pid_t) -> std::io::Result<GroupGuard> {
        // SAFETY: getpid has no preconditions.
        let harness = unsafe { libc::getpid() };
        // Where close_range(2) is missing (before Linux 5.9) or refused (a seccomp profile),
        // the guard closes each descriptor below the soft limit instead (a descriptor above it
        // exists only if the limit was lowered after it was opened). The limit is read here,
        // before the fork.
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `limit` is a valid rlimit for getrlimit to fill.
        let max_fd = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
            limit.rlim_cur.clamp(3, 1 << 20) as libc::c_int
        } else {
            1024
        };
        // SAFETY: fork in a threaded process: the child runs only async-signal-safe calls
        // (setsid, signal, close_range or close, getppid, kill, nanosleep, _exit) and touches
        // no lock or allocator.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: the forked child; see above. The harness's handlers are not its own, and
            // it holds no descriptor of the harness, so no pipe of another child stays open
            // for it.
            unsafe {
                libc::setsid();
                for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                if close_loop_forced()
                    || libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0
                {
                    for fd in 0..max_fd {
                        libc::close(fd);
                    }
                }
                let pause = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 100_000_000,
                };
                loop {
                    if libc::kill(-pgid, 0) != 0 {
                        libc::_exit(0);
                    }
                    if libc::getppid() != harness {
                        libc::kill(-pgid, libc::SIGKILL);
                        libc::_exit(0);
                    }
                    libc::nanosleep(&pause, std::ptr::null_mut());
                }
            }
        }
        Ok(GroupGuard { pid, pgid })
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        // SAFETY: the group is the run's own (its leader is reaped only by the caller, and
        // Linux does not hand out a pid still in use as a group id, so a stale `pgid` names no
        // other group); the guard is our own forked child, reaped only here.
        unsafe {
            libc::kill(-self.pgid, libc::SIGKILL);
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// Writes `text` to `path` as an executable script (mode 0755), so that it can be run at
/// once from a process with other threads that start programs (a test binary, the harness).
/// `path` is replaced, not followed, when it is a link or a read-only file.
///
/// A file written by this process and run by it next can fail with "Text file busy"
/// (ETXTBSY): a program another thread starts between `fork` and `exec` holds a copy of the
/// descriptor the file was written through. So the text goes to a side file private to this
/// call (created new, beside `path`, removed after), and GNU `install(1)`, a process that
/// starts nothing, writes the script. Errors: the side file cannot be created, `install`
/// cannot be run (the message names it and `path`), or it fails (its status and stderr).
pub fn write_script(path: &Path, text: &str) -> std::io::Result<()> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut side = path.as_os_str().to_owned();
    side.push(format!(".text-{}-{n}", std::process::id()));
    let side = std::path::PathBuf::from(side);
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&side)?;
        f.write_all(text.as_bytes())?;
    }
    let out = std::process::Command::new("install")
        // -T: a destination that is a folder is an error, not a folder to write into.
        .args(["-T", "-m", "755"])
        .arg(&side)
        .arg(path)
        .stdin(std::process::Stdio::null())
        .output();
    let _ = std::fs::remove_file(&side);
    let out = out.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("running install(1) to write {}: {e}", path.display()),
        )
    })?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "install {} failed ({}): {}",
            path.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// The first character of `path` at which the dynamic loader splits the variable `var`
/// (`LD_PRELOAD`: colons and white space; `LD_LIBRARY_PATH` and the others: colons and
/// semicolons); `None` when the path can stand in it whole.
pub fn loader_split_char(var: &str, path: &Path) -> Option<char> {
    let seps: &[char] = if var == "LD_PRELOAD" {
        &[':', ' ', '\t', '\n']
    } else {
        &[':', ';']
    };
    path.to_string_lossy().chars().find(|c| seps.contains(c))
}

/// Refuses a path the dynamic loader would split when it reads `var`: `LD_LIBRARY_PATH` is
/// split at `:` and `;`, `LD_PRELOAD` at `:` and white space. Such a path (a bundle under a
/// folder named with a space, say) would make every run load the wrong files and fail its
/// proof for a reason the proof cannot name.
///
/// Errors: the message names the path, the character and the variable.
pub fn check_loader_path(var: &str, path: &Path) -> Result<(), String> {
    match loader_split_char(var, path) {
        Some(c) => Err(format!(
            "{} contains {c:?}, which the dynamic loader splits {var} at: move the workspace (or \
             the bundle) to a path without it",
            path.display()
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;

    /// A shell in a group of its own with a grandchild (`sleep 60`): the shell and the
    /// grandchild's pid.
    fn group_with_grandchild() -> (std::process::Child, i32) {
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 60 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(sh.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (sh, line.trim().parse().unwrap())
    }

    /// Waits up to 30 s for `pid` to stop running (the guard looks every 100 ms; the margin
    /// is for a loaded machine).
    fn wait_until_gone(pid: i32) {
        let t0 = std::time::Instant::now();
        while runs(pid) && t0.elapsed() < std::time::Duration::from_secs(30) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Whether `pid` still runs (a zombie no longer does).
    fn runs(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                let state = s.rsplit(')').next().unwrap_or("").trim_start();
                !state.starts_with('Z') && !state.starts_with('X')
            })
            .unwrap_or(false)
    }

    #[test]
    fn the_group_goes_when_the_process_that_guards_it_dies() {
        let (mut sh, grandchild) = group_with_grandchild();
        let pgid = sh.id() as i32;
        assert!(runs(grandchild));
        // A stand-in for the harness: a forked process that starts the guard and dies at once
        // (as a SIGKILLed harness would, with no cleanup).
        // SAFETY: the forked child only forks again (GroupGuard::start, async-signal-safe
        // calls) and _exits; the parent reaps it.
        unsafe {
            let stand_in = libc::fork();
            assert!(stand_in >= 0);
            if stand_in == 0 {
                let g = GroupGuard::start(pgid);
                std::mem::forget(g);
                libc::_exit(0);
            }
            libc::waitpid(stand_in, std::ptr::null_mut(), 0);
        }
        wait_until_gone(grandchild);
        assert!(
            !runs(grandchild),
            "the grandchild outlived the guard's harness"
        );
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(sh.wait().unwrap().signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn a_dropped_guard_ends_what_is_left_of_the_group() {
        let (mut sh, grandchild) = group_with_grandchild();
        let pgid = sh.id() as i32;
        let guard = GroupGuard::start(pgid).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(
            runs(grandchild),
            "the guard killed the group while its harness lived"
        );
        drop(guard);
        wait_until_gone(grandchild);
        assert!(!runs(grandchild), "the grandchild outlived its run");
        sh.wait().unwrap();
    }

    /// The session id of `pid` (field 6 of `/proc/PID/stat`), `None` once it is gone.
    fn session_of(pid: i32) -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit(')')
            .next()?
            .split_whitespace()
            .nth(3)?
            .parse()
            .ok()
    }

    /// A forked stand-in for the harness, a group leader: dropping it kills its group and
    /// reaps it, so a failed assertion leaves no process behind (one that waits for ever in
    /// pause() would keep the test binary's output open).
    struct StandIn(libc::pid_t);

    impl Drop for StandIn {
        fn drop(&mut self) {
            // SAFETY: our own forked child, reaped only here; its group is its own.
            unsafe {
                libc::kill(-self.0, libc::SIGKILL);
                libc::kill(self.0, libc::SIGKILL);
                libc::waitpid(self.0, std::ptr::null_mut(), 0);
            }
        }
    }

    #[test]
    fn a_signal_to_the_harness_group_leaves_the_guard_watching() {
        // The stand-in harness is a group leader; the signal goes to its whole group, as
        // `kill -KILL -- -PGID`, a closed terminal or `timeout -s KILL` send it.
        let (mut sh, grandchild) = group_with_grandchild();
        let pgid = sh.id() as i32;
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2(2) writes; close-on-exec so
        // that no process another test starts keeps them.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: the forked child closes every descriptor but the pipe's write end (none of
        // another test's pipes stays open for it), makes itself a group leader, forks the
        // guard (GroupGuard::start: getpid, getrlimit and fork, then async-signal-safe calls
        // only), writes the guard's pid and waits to be killed; the parent owns it through
        // `StandIn`.
        let stand_in = unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                let w = fds[1] as u32;
                libc::syscall(libc::SYS_close_range, 0u32, w - 1, 0u32);
                libc::syscall(libc::SYS_close_range, w + 1, u32::MAX, 0u32);
                libc::setpgid(0, 0);
                let g = GroupGuard::start(pgid);
                let guard = g.as_ref().map_or(-1, |g| g.pid);
                libc::write(fds[1], (&raw const guard).cast(), 4);
                std::mem::forget(g);
                loop {
                    libc::pause();
                }
            }
            // The group exists from here on, whichever of the two calls runs first.
            libc::setpgid(pid, pid);
            StandIn(pid)
        };
        let mut guard = -1i32;
        // SAFETY: both ends are ours; poll waits at most 30 s for the pid; the read fills at
        // most the 4 bytes of `guard`.
        let n = unsafe {
            libc::close(fds[1]);
            let mut p = libc::pollfd {
                fd: fds[0],
                events: libc::POLLIN,
                revents: 0,
            };
            let n = if libc::poll(&mut p, 1, 30_000) == 1 {
                libc::read(fds[0], (&raw mut guard).cast(), 4)
            } else {
                -1
            };
            libc::close(fds[0]);
            n
        };
        assert!(n == 4 && guard > 0, "the stand-in started no guard");
        // The signal must come after the guard has left the stand-in's session (and group):
        // sent before its setsid, it would kill the guard too.
        let t0 = std::time::Instant::now();
        while session_of(guard) != Some(guard) {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(30),
                "the guard {guard} did not start a session of its own"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // SAFETY: the stand-in is a group leader (setpgid above).
        assert_eq!(unsafe { libc::kill(-stand_in.0, libc::SIGKILL) }, 0);
        drop(stand_in);
        wait_until_gone(grandchild);
        assert!(!runs(grandchild), "the guard died with its harness's group");
        sh.wait().unwrap();
    }

    /// How many descriptors `pid` has open, once it has closed what it inherited: waits up
    /// to 30 s for the count to reach 0, and returns the last count seen.
    fn open_descriptors_settled(pid: i32) -> usize {
        let t0 = std::time::Instant::now();
        loop {
            let n = std::fs::read_dir(format!("/proc/{pid}/fd"))
                .map(|d| d.count())
                .unwrap_or(usize::MAX);
            if n == 0 || t0.elapsed() > std::time::Duration::from_secs(30) {
                return n;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn the_guard_keeps_no_descriptor_of_the_harness_with_or_without_close_range() {
        for forced in [false, true] {
            CLOSE_LOOP_FORCED.store(forced, std::sync::atomic::Ordering::Relaxed);
            let (mut sh, _grandchild) = group_with_grandchild();
            // A descriptor the guard inherits and must close: an open file of this process.
            let held = std::fs::File::open("/proc/self/stat").unwrap();
            let guard = GroupGuard::start(sh.id() as i32).unwrap();
            CLOSE_LOOP_FORCED.store(false, std::sync::atomic::Ordering::Relaxed);
            let n = open_descriptors_settled(guard.pid);
            drop(held);
            drop(guard);
            sh.wait().unwrap();
            assert_eq!(
                n, 0,
                "the guard kept {n} descriptors (one by one: {forced})"
            );
        }
    }

    #[test]
    fn a_written_script_runs_and_a_failed_write_names_the_path() {
        let dir = std::env::temp_dir().join(format!("bundle-script-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("s.sh");
        write_script(&script, "#!/bin/sh\necho ran \"$1\"\n").unwrap();
        // written again over itself, as the tests that use it do
        write_script(&script, "#!/bin/sh\necho ran again \"$1\"\n").unwrap();
        let out = std::process::Command::new(&script)
            .arg("x")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ran again x\n");
        // install(1) writes the script: a destination it cannot write fails with its words.
        std::fs::create_dir_all(dir.join("a-folder")).unwrap();
        let e = write_script(&dir.join("a-folder"), "#!/bin/sh\n").unwrap_err();
        assert!(e.to_string().contains("a-folder"), "{e}");
        let e = write_script(&dir.join("missing/s.sh"), "#!/bin/sh\n").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn paths_the_loader_would_split_are_refused_with_their_variable() {
        assert!(check_loader_path("LD_PRELOAD", Path::new("/w/target/probe.so")).is_ok());
        let e = check_loader_path("LD_PRELOAD", Path::new("/tmp/w s/probe.so")).unwrap_err();
        assert!(
            e.contains("/tmp/w s/probe.so") && e.contains("LD_PRELOAD"),
            "{e}"
        );
        assert!(check_loader_path("LD_PRELOAD", Path::new("/tmp/a:b/p.so")).is_err());
        // a space is fine in LD_LIBRARY_PATH; its separators are ':' and ';'
        assert!(check_loader_path("LD_LIBRARY_PATH", Path::new("/tmp/w s/lib")).is_ok());
        for bad in ["/tmp/a:b/lib", "/tmp/a;b/lib"] {
            let e = check_loader_path("LD_LIBRARY_PATH", Path::new(bad)).unwrap_err();
            assert!(e.contains("LD_LIBRARY_PATH") && e.contains(bad), "{e}");
        }
    }
}
