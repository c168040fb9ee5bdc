//! What `ab` (its `rpc` and `pipeline` commands) and `bench gpu --devices` share about a
//! `ggml-rpc-server` they start on 127.0.0.1: the device lists that may name its device
//! (`RPC0`), the wait until it accepts connections, and how many clients its log says it
//! served. Each caller spawns the server its own way (each has its own notion of an arm);
//! this crate holds the rules both must apply alike.

use std::net::TcpStream;
use std::process::Child;
use std::time::{Duration, Instant};

/// The line `ggml-rpc-server` prints (on stdout) for each connection it accepts.
pub const ACCEPTED_LINE: &str = "Accepted client connection";

/// The devices of a comma-separated list (`CUDA0,CUDA1`, `RPC0, CUDA0`), trimmed, in order.
/// Errors (a sentence, for the caller to prefix with its option's name): an empty name, a
/// device named twice, fewer than `min` devices, or an RPC device other than `RPC0` (one
/// server is started, and llama.cpp names its device RPC0).
pub fn parse_devices(list: &str, min: usize) -> Result<Vec<String>, String> {
    let devices: Vec<String> = list.split(',').map(|d| d.trim().to_string()).collect();
    if devices.iter().any(String::is_empty) {
        return Err(format!("{list:?} has an empty device name"));
    }
    let mut distinct = devices.clone();
    distinct.sort();
    distinct.dedup();
    if distinct.len() != devices.len() {
        return Err(format!("{list:?} names a device twice"));
    }
    if devices.len() < min {
        return Err(format!(
            "{list:?} names {} device(s), {min} needed",
            devices.len()
        ));
    }
    if let Some(d) = devices
        .iter()
        .find(|d| d.starts_with("RPC") && d.as_str() != "RPC0")
    {
        return Err(format!(
            "{d}: one ggml-rpc-server is started, whose device is RPC0"
        ));
    }
    Ok(devices)
}

/// Waits until something accepts connections on 127.0.0.1:`port`, checking every 100 ms for
/// at most `timeout`. The check's own connection is opened and closed at once, and the
/// server logs it like any client's ([`clients_served`] leaves it out). Errors: `child`
/// exited first (with its status), its state could not be read, or nothing listened in time
/// (the caller kills it).
/// Refuses a port that something already listens on, before a server is started there: the
/// new server would fail to bind ("Failed to create server socket") while
/// [`wait_listening`] found the other process listening, and the clients would talk to it.
/// (Binding sets `SO_REUSEADDR`, so connections of an earlier run left in TIME_WAIT do not
/// count.)
pub fn port_free(port: u16) -> Result<(), String> {
    std::net::TcpListener::bind(("127.0.0.1", port))
        .map(drop)
        .map_err(|e| {
            format!(
                "127.0.0.1:{port} is taken ({e}): another process listens there (a \
                 ggml-rpc-server left by an interrupted run?); stop it or choose another port"
            )
        })
}

pub fn wait_listening(child: &mut Child, port: u16, timeout: Duration) -> Result<(), String> {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return Err(format!(
                    "ggml-rpc-server exited before it listened ({status})"
                ))
            }
            Ok(None) => {}
            Err(e) => return Err(format!("ggml-rpc-server: cannot tell whether it runs: {e}")),
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if started.elapsed() > timeout {
            return Err(format!(
                "ggml-rpc-server did not listen on 127.0.0.1:{port} within {} s",
                timeout.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The clients a server's log says it accepted, besides [`wait_listening`]'s own check: the
/// count of [`ACCEPTED_LINE`] less one (0 when the log has none).
pub fn clients_served(log: &str) -> usize {
    log.matches(ACCEPTED_LINE).count().saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_something_listens_on_is_refused() {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let e = port_free(port).unwrap_err();
        assert!(e.contains(&format!("127.0.0.1:{port} is taken")), "{e}");
        // (Not checked here that the port is free again once `l` is dropped: the other tests
        // of this binary bind ephemeral ports in parallel and may take it. The harness's RPC
        // steps check the free case on every run.)
        drop(l);
    }
    use std::net::TcpListener;
    use std::process::Command;

    #[test]
    fn a_device_list_is_distinct_names_with_rpc0_only() {
        assert_eq!(
            parse_devices("CUDA0, CUDA1", 2).unwrap(),
            ["CUDA0", "CUDA1"]
        );
        assert_eq!(parse_devices("RPC0,CUDA0", 2).unwrap(), ["RPC0", "CUDA0"]);
        assert_eq!(parse_devices("HRX0", 1).unwrap(), ["HRX0"]);
        let err = |list, min| parse_devices(list, min).unwrap_err();
        assert!(err("CUDA0", 2).contains("1 device(s), 2 needed"));
        assert!(err("CUDA0,CUDA0", 2).contains("twice"));
        assert!(err("CUDA0,,CUDA1", 2).contains("empty"));
        assert!(err("RPC1,CUDA0", 2).starts_with("RPC1:"));
    }

    #[test]
    fn the_check_connection_is_not_a_client() {
        assert_eq!(clients_served(""), 0);
        assert_eq!(clients_served("Accepted client connection\n"), 0);
        let two = "x\nAccepted client connection\nload\nAccepted client connection\n";
        assert_eq!(clients_served(two), 1);
    }

    #[test]
    fn waits_for_a_listener_and_fails_on_an_exited_child() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut sleeper = Command::new("sleep").arg("5").spawn().unwrap();
        assert_eq!(
            wait_listening(&mut sleeper, port, Duration::from_secs(5)),
            Ok(())
        );
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        drop(listener);

        let mut done = Command::new("true").spawn().unwrap();
        let _ = done.wait();
        let e = wait_listening(&mut done, port, Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("exited before it listened"), "{e}");
    }

    /// A loopback TCP port that nothing listens on and no other socket can take while the
    /// returned descriptor is open: bound, never listening. (A port bound and released could
    /// be taken by another test's listener, or be a connect's own source port, a TCP
    /// self-connection that would look like a listener.)
    fn reserved_port() -> (std::os::fd::OwnedFd, u16) {
        use std::os::fd::FromRawFd;
        // SAFETY: plain socket calls on a descriptor made here; `addr` and `len` are a valid
        // sockaddr_in and its size for bind and getsockname.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
            let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
            let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let p = (&raw mut addr).cast::<libc::sockaddr>();
            assert_eq!(
                libc::bind(fd, p, len),
                0,
                "bind: {}",
                std::io::Error::last_os_error()
            );
            assert_eq!(libc::getsockname(fd, p, &mut len), 0);
            (owned, u16::from_be(addr.sin_port))
        }
    }

    #[test]
    fn gives_up_after_the_timeout() {
        let (_reserved, port) = reserved_port();
        let mut sleeper = Command::new("sleep").arg("5").spawn().unwrap();
        let e = wait_listening(&mut sleeper, port, Duration::from_millis(300)).unwrap_err();
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert!(e.contains("did not listen"), "{e}");
    }
}
