//! What the processes the harness starts need: paths the dynamic loader reads whole, and an
//! end with the harness.

use std::path::Path;

/// Makes the process `cmd` starts get SIGTERM when the thread that starts it ends: the
/// harness's children go when it goes, even killed by a signal no cleanup of ours sees
/// (SIGKILL). Such a child would go on using an arm's folder whose lock has passed to the
/// next job, or keep a port. Start the child from a thread that outlives it (one that waits
/// for it). Only the child itself is covered, not what it starts in turn.
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

/// Refuses a path the dynamic loader would split when it reads `var`: `LD_LIBRARY_PATH` is
/// split at `:` and `;`, `LD_PRELOAD` at `:` and white space. Such a path (a bundle under a
/// folder named with a space, say) would make every run load the wrong files and fail its
/// proof for a reason the proof cannot name.
///
/// Errors: the message names the path, the character and the variable.
pub fn check_loader_path(var: &str, path: &Path) -> Result<(), String> {
    let seps: &[char] = if var == "LD_PRELOAD" {
        &[':', ' ', '\t', '\n']
    } else {
        &[':', ';']
    };
    let text = path.to_string_lossy();
    match text.chars().find(|c| seps.contains(c)) {
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
