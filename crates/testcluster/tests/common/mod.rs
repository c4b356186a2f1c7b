//! Helpers shared by the harness's own tests.
#![allow(dead_code)]

use basalt_testcluster::Host;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bound of a connection expected to work (generous: a loaded machine must not fail it).
pub const REACH_TIMEOUT: Duration = Duration::from_secs(3);
/// Bound of a connection expected to fail (every such check costs this much).
pub const CUT_TIMEOUT: Duration = Duration::from_millis(700);
/// Longest life of a test server thread.
const SERVER_LIFETIME: Duration = Duration::from_secs(60);

/// A TCP server bound inside a host that answers every connection with one `!` and then
/// `payload_bytes` of payload; stops when dropped.
pub struct Server {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts a [`Server`] on `host.ip:port`.
pub fn serve(host: &Host, port: u16, payload_bytes: usize) -> Server {
    let addr = SocketAddr::from((host.ip, port));
    // The socket belongs to the namespace it was created in, whichever thread accepts.
    let listener = host
        .enter(move || TcpListener::bind(addr))
        .expect("enter host")
        .expect("bind test server");
    listener.set_nonblocking(true).expect("nonblocking");
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        let end = Instant::now() + SERVER_LIFETIME;
        let payload = vec![7u8; payload_bytes];
        while !flag.load(Ordering::Relaxed) && Instant::now() < end {
            match listener.accept() {
                Ok((mut conn, _)) => {
                    let _ = conn.set_nonblocking(false);
                    let _ = conn.set_write_timeout(Some(Duration::from_secs(10)));
                    let _ = conn.write_all(b"!");
                    let _ = conn.write_all(&payload);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    Server { addr, stop }
}

/// Whether a connection from inside `from` (or from the root namespace if `None`) to `to`
/// gets the server's `!` within `timeout`.
fn can_connect(from: Option<&Host>, to: SocketAddr, timeout: Duration) -> bool {
    let attempt = move || -> std::io::Result<bool> {
        let mut conn = TcpStream::connect_timeout(&to, timeout)?;
        conn.set_read_timeout(Some(timeout))?;
        let mut byte = [0u8; 1];
        conn.read_exact(&mut byte)?;
        Ok(byte[0] == b'!')
    };
    match from {
        Some(host) => host.enter(attempt).expect("enter host").unwrap_or(false),
        None => attempt().unwrap_or(false),
    }
}

/// Whether `from` reaches the server at `to` (bounded by [`REACH_TIMEOUT`]).
pub fn reaches(from: Option<&Host>, to: SocketAddr) -> bool {
    can_connect(from, to, REACH_TIMEOUT)
}

/// Whether `from` fails to reach the server at `to` within [`CUT_TIMEOUT`].
pub fn cut(from: Option<&Host>, to: SocketAddr) -> bool {
    !can_connect(from, to, CUT_TIMEOUT)
}

/// Reads everything the server at `to` sends, from inside `from`; returns the byte count.
pub fn download(from: &Host, to: SocketAddr) -> usize {
    from.enter(move || -> std::io::Result<usize> {
        let mut conn = TcpStream::connect_timeout(&to, REACH_TIMEOUT)?;
        conn.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut all = Vec::new();
        conn.read_to_end(&mut all)?;
        Ok(all.len())
    })
    .expect("enter host")
    .expect("download")
}

/// Whether `pid` is a live process (a zombie waiting for its reaper counts as dead).
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat[stat
                .rfind(')')
                .expect("/proc/PID/stat names the command in parentheses")
                + 1..]
                .trim_start()
                .chars()
                .next();
            state != Some('Z') && state != Some('X')
        }
        Err(_) => false,
    }
}

/// The state letter of /proc/PID/stat.
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// Names listed by `ip netns list`.
pub fn netns_list() -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("run ip netns list");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether a link exists in the root namespace.
pub fn link_exists(name: &str) -> bool {
    std::path::Path::new("/sys/class/net").join(name).exists()
}

/// Whether `nft` is installed (loopback partitions need it).
pub fn have_nft() -> bool {
    ["/usr/sbin/nft", "/sbin/nft"]
        .iter()
        .any(|p| std::path::Path::new(p).exists())
}
