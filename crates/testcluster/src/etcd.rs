//! A real etcd (`/usr/bin/etcd`, Debian `etcd-server` 3.4) on a host of the test network.

use crate::host::Host;
use crate::net::Net;
use crate::process::{Proc, ProcessSpec};
use anyhow::{bail, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The etcd binary of Debian's `etcd-server` package.
pub const ETCD_BIN: &str = "/usr/bin/etcd";
/// Port etcd serves clients on.
pub const ETCD_CLIENT_PORT: u16 = 2379;
/// Port etcd talks to its peers on.
pub const ETCD_PEER_PORT: u16 = 2380;
/// Longest wait for a started etcd to report itself healthy.
pub const ETCD_READY_WAIT: Duration = Duration::from_secs(30);
/// Bound of one health probe (connect, and read of the answer).
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// A single-member etcd cluster on one host. Derefs to its [`Proc`] for the faults
/// (`kill9`, `stop`, `cont`, ...); [`Etcd::restart`] keeps the data directory and waits until
/// it is healthy again.
#[derive(Debug, Clone)]
pub struct Etcd {
    proc: Proc,
    data_dir: PathBuf,
}

impl Net {
    /// Starts etcd on `host`, serving clients on `HOST_IP:2379` and peers on `HOST_IP:2380`,
    /// data under `dir()/etcd-HOST`, and waits (at most [`ETCD_READY_WAIT`]) until its
    /// `/health` answers true.
    pub fn start_etcd(&self, host: &Host) -> Result<Etcd> {
        if !Path::new(ETCD_BIN).exists() {
            bail!("{ETCD_BIN} is missing: install the Debian package etcd-server");
        }
        let data_dir = self.dir().join(format!("etcd-{}", host.name));
        let client = format!("http://{}:{ETCD_CLIENT_PORT}", host.ip);
        let peer = format!("http://{}:{ETCD_PEER_PORT}", host.ip);
        let member = format!("basalt-{}", host.name);
        let spec = ProcessSpec::new(ETCD_BIN)
            .name("etcd")
            .arg(format!("--name={member}"))
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={member}={peer}"))
            .arg("--initial-cluster-state=new")
            .arg("--logger=zap")
            .arg("--log-level=info");
        let etcd = Etcd {
            proc: self.spawn(host, spec)?,
            data_dir,
        };
        etcd.wait_ready(ETCD_READY_WAIT)?;
        Ok(etcd)
    }
}

impl Etcd {
    /// The client URL, `http://HOST_IP:2379`.
    pub fn endpoint(&self) -> String {
        format!("http://{}:{ETCD_CLIENT_PORT}", self.proc.host().ip)
    }

    /// The process, for the faults.
    pub fn proc(&self) -> &Proc {
        &self.proc
    }

    /// The data directory (kept across restarts).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Starts etcd again on its data directory (the old process must be dead) and waits until
    /// it is healthy.
    pub fn restart(&self) -> Result<()> {
        self.proc.restart()?;
        self.wait_ready(ETCD_READY_WAIT)
    }

    /// Waits until `GET /health` answers `"health":"true"`, probing from inside the host's
    /// namespace (so it works while the host is partitioned), at most `timeout`.
    pub fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let addr = SocketAddr::from((self.proc.host().ip, ETCD_CLIENT_PORT));
        let mut last: String;
        // Loop bound: `timeout`.
        loop {
            if let Some(status) = self.proc.exit_status() {
                bail!(
                    "etcd on {} exited ({status}); log tail:\n{}",
                    self.proc.host().name,
                    self.proc.log_tail()
                );
            }
            match self.proc.host().enter(move || health(addr))? {
                Ok(answer) if answer.contains("\"health\":\"true\"") => return Ok(()),
                Ok(answer) => last = answer,
                Err(e) => last = e.to_string(),
            }
            if Instant::now() >= deadline {
                bail!(
                    "etcd on {} not healthy within {timeout:?} (last: {last}); log tail:\n{}",
                    self.proc.host().name,
                    self.proc.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl std::ops::Deref for Etcd {
    type Target = Proc;

    fn deref(&self) -> &Proc {
        &self.proc
    }
}

/// One `GET /health` over plain HTTP/1.0; returns the whole answer.
fn health(addr: SocketAddr) -> std::io::Result<String> {
    let mut conn = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
    conn.set_read_timeout(Some(PROBE_TIMEOUT))?;
    conn.set_write_timeout(Some(PROBE_TIMEOUT))?;
    write!(conn, "GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut answer = Vec::new();
    // HTTP/1.0: the server closes after the answer; the read timeout bounds a stuck one.
    conn.take(64 * 1024).read_to_end(&mut answer)?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}
