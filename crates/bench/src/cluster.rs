//! The `basalt up` process under test: started from the current executable, its NBD address
//! read from the banner, its CPU time read from /proc (see `cpu`), and stopped when dropped.

use anyhow::{bail, Context};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long `basalt up` may take to print its banner.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `basalt up` may take to exit after SIGTERM before it is killed.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(15);
/// The banner line printed once the cluster serves.
const READY_LINE: &str = "Press Ctrl-C to stop.";
/// The banner line carrying the NBD address.
const NBD_PREFIX: &str = "NBD (TCP):";

/// How the cluster is configured (passed explicitly so the report can state it).
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// OSDs.
    pub osds: u32,
    /// Replicas per object (ignored with `ec`).
    pub replicas: u32,
    /// Erasure-code the pool instead (`2+1`): `basalt up --ec`.
    pub ec: Option<String>,
    /// Placement groups.
    pub pgs: u32,
    /// Object size (`128K`).
    pub object_size: String,
    /// Capacity of each OSD store file (`8G`).
    pub osd_size: String,
    /// Size of the volume `bench` (`256M`).
    pub volume_size: String,
    /// Whether the S3 gateway runs (on an ephemeral port).
    pub s3: bool,
    /// Whether the NVMe/TCP target runs (on an ephemeral port).
    pub nvmf: bool,
}

/// A running `basalt up`; SIGTERM then SIGKILL on drop.
pub struct Cluster {
    child: Child,
    /// `nbd://127.0.0.1:PORT/bench`.
    pub uri: String,
    /// The "Basalt is up: ..." line.
    pub banner: Option<String>,
    /// The S3 gateway and its first-start key.
    s3: Option<crate::under_test::S3Endpoint>,
    /// The control socket (its path, from the banner).
    control: Option<String>,
    /// The NVMe/TCP target's address, from the banner.
    nvmf: Option<std::net::SocketAddr>,
    /// The `/metrics` endpoint (`IP:PORT`), from the banner; `None` with
    /// `--metrics-listen off`.
    pub metrics: Option<String>,
}

impl Cluster {
    /// Start `basalt up` with its state in `data_dir` and its log in `log`, and wait (bounded)
    /// until it serves.
    pub fn start(data_dir: &Path, log: &Path, config: &ClusterConfig) -> anyhow::Result<Cluster> {
        let exe = std::env::current_exe().context("find the basalt executable")?;
        Cluster::start_exe(&exe, data_dir, log, config)
    }

    /// [`Cluster::start`] with the `basalt` executable `exe` (another build, to compare).
    pub fn start_exe(
        exe: &Path,
        data_dir: &Path,
        log: &Path,
        config: &ClusterConfig,
    ) -> anyhow::Result<Cluster> {
        Cluster::start_exe_with(exe, data_dir, log, config, &[])
    }

    /// [`Cluster::start_exe`] with `extra` arguments to `basalt up`.
    pub fn start_exe_with(
        exe: &Path,
        data_dir: &Path,
        log: &Path,
        config: &ClusterConfig,
        extra: &[&str],
    ) -> anyhow::Result<Cluster> {
        let log_file =
            std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
        let mut child = Command::new(exe)
            .arg("up")
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--nbd-listen", "127.0.0.1:0"])
            .args(["--s3-listen", if config.s3 { "127.0.0.1:0" } else { "off" }])
            .args(if config.nvmf {
                &["--nvmf-listen", "127.0.0.1:0"][..]
            } else {
                &[]
            })
            .args(["--default-volume", "bench"])
            .args(["--default-volume-size", &config.volume_size])
            .args(["--osds", &config.osds.to_string()])
            .args(match &config.ec {
                Some(code) => ["--ec".to_string(), code.clone()],
                None => ["--replicas".to_string(), config.replicas.to_string()],
            })
            .args(["--pgs", &config.pgs.to_string()])
            .args(["--object-size", &config.object_size])
            .args(["--osd-size", &config.osd_size])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .context("start basalt up")?;
        let stdout = child.stdout.take().context("basalt up stdout")?;
        // From here on the guard stops the process on every error path.
        let mut cluster = Cluster {
            child,
            uri: String::new(),
            banner: None,
            s3: None,
            control: None,
            nvmf: None,
            metrics: None,
        };
        let mut s3_url = None;
        let (tx, rx) = mpsc::channel();
        // Reads the banner, then keeps draining stdout so the daemon never blocks on it.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let t = line.trim();
                    if t.starts_with("Basalt is up") {
                        cluster.banner = Some(t.to_string());
                    }
                    if let Some(rest) = t.strip_prefix(NBD_PREFIX) {
                        cluster.uri = rest.trim().to_string();
                    }
                    if let Some(rest) = t.strip_prefix("Control API:") {
                        cluster.control = rest.split_whitespace().next().map(String::from);
                    }
                    if let Some(rest) = t.strip_prefix("NVMe/TCP:") {
                        cluster.nvmf = rest.split_whitespace().next().and_then(|a| a.parse().ok());
                    }
                    if let Some(rest) = t.strip_prefix("Metrics:") {
                        cluster.metrics = rest
                            .trim()
                            .strip_prefix("http://")
                            .and_then(|r| r.strip_suffix("/metrics"))
                            .map(String::from);
                    }
                    if let Some(rest) = t.strip_prefix("S3:") {
                        s3_url = rest.split_whitespace().next().map(String::from);
                    }
                    if t == READY_LINE {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => bail!(
                    "basalt up printed no banner within {} s (log: {})",
                    STARTUP_TIMEOUT.as_secs(),
                    log.display()
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    bail!("basalt up exited during start-up (log: {})", log.display())
                }
            }
        }
        if !cluster.uri.starts_with("nbd://") {
            bail!("basalt up did not print its NBD address");
        }
        cluster.s3 = s3_url.and_then(|url| {
            let creds = std::fs::read_to_string(data_dir.join("s3-credentials")).ok()?;
            let field = |name: &str| {
                creds.lines().find_map(|l| {
                    let (k, v) = l.split_once('=')?;
                    (k.trim() == name).then(|| v.trim().to_string())
                })
            };
            Some(crate::under_test::S3Endpoint {
                url,
                access_key: field("aws_access_key_id")?,
                secret_key: field("aws_secret_access_key")?,
            })
        });
        Ok(cluster)
    }

    /// Process id of `basalt up`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SIGTERM first so the daemon shuts down as in normal use; SIGKILL if it lingers.
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl crate::under_test::UnderTest for Cluster {
    fn uri(&self) -> &str {
        &self.uri
    }

    fn cpu_sources(&self) -> Vec<crate::cpu::CpuSource> {
        vec![crate::cpu::CpuSource::Process {
            name: "basalt up".into(),
            pid: self.pid(),
        }]
    }

    fn close(&mut self) -> Vec<String> {
        // Dropping stops the process; nothing the report needs to say.
        Vec::new()
    }

    fn s3(&self) -> Option<crate::under_test::S3Endpoint> {
        self.s3.clone()
    }

    fn control(&self) -> Option<String> {
        self.control.clone()
    }

    fn nvmf(&self) -> Option<std::net::SocketAddr> {
        self.nvmf
    }
}
