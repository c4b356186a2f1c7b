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
        let banner = Banner::read(stdout, log)?;
        if !banner.nbd_uri.starts_with("nbd://") {
            bail!("basalt up did not print its NBD address");
        }
        cluster.s3 = match banner.s3_url {
            Some(url) => {
                let path = data_dir.join("s3-credentials");
                let key = basalt_s3client::Credentials::load_profile(&path, Some("basalt"))
                    .context("read the S3 key `basalt up` wrote")?;
                Some(crate::under_test::S3Endpoint {
                    url,
                    access_key: key.access_key,
                    secret_key: key.secret_key,
                })
            }
            None => None,
        };
        cluster.uri = banner.nbd_uri;
        cluster.banner = banner.line;
        cluster.control = banner.control;
        cluster.nvmf = banner.nvmf;
        cluster.metrics = banner.metrics;
        Ok(cluster)
    }

    /// Process id of `basalt up`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// What `basalt up` printed before serving: the one place the bench reads its human
/// banner (`basalt up --ready-file` can replace it here).
#[derive(Debug, Default, PartialEq)]
struct Banner {
    /// The "Basalt is up: ..." line.
    line: Option<String>,
    /// `nbd://127.0.0.1:PORT/bench`.
    nbd_uri: String,
    /// The control socket's path.
    control: Option<String>,
    /// The NVMe/TCP target's address.
    nvmf: Option<std::net::SocketAddr>,
    /// The `/metrics` endpoint (`IP:PORT`).
    metrics: Option<String>,
    /// The S3 gateway's URL.
    s3_url: Option<String>,
}

impl Banner {
    /// Read the banner from `basalt up`'s `stdout` (bounded by [`STARTUP_TIMEOUT`]), then
    /// keep draining it so the daemon never blocks on it; `log` is named in errors.
    fn read(stdout: std::process::ChildStdout, log: &Path) -> anyhow::Result<Banner> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let mut banner = Banner::default();
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if banner.take(&line) {
                        return Ok(banner);
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
    }

    /// Take one line of the banner; true once it is complete ([`READY_LINE`]).
    fn take(&mut self, line: &str) -> bool {
        let t = line.trim();
        let first_word = |rest: &str| rest.split_whitespace().next().map(String::from);
        if t.starts_with("Basalt is up") {
            self.line = Some(t.to_string());
        }
        if let Some(rest) = t.strip_prefix(NBD_PREFIX) {
            self.nbd_uri = rest.trim().to_string();
        }
        if let Some(rest) = t.strip_prefix("Control API:") {
            self.control = first_word(rest);
        }
        if let Some(rest) = t.strip_prefix("NVMe/TCP:") {
            self.nvmf = rest.split_whitespace().next().and_then(|a| a.parse().ok());
        }
        if let Some(rest) = t.strip_prefix("Metrics:") {
            self.metrics = rest
                .trim()
                .strip_prefix("http://")
                .and_then(|r| r.strip_suffix("/metrics"))
                .map(String::from);
        }
        if let Some(rest) = t.strip_prefix("S3:") {
            self.s3_url = first_word(rest);
        }
        t == READY_LINE
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: every address the bench uses is read from `basalt up`'s banner, and the banner
    /// ends at the ready line (lines after it are not read).
    #[test]
    fn reads_the_banner() {
        let text = "Basalt is up: 3 OSDs, pool \"rbd\" (3 replicas, 32 PGs), data in /d\n\
                    \x20 NBD (TCP):   nbd://127.0.0.1:4001/bench\n\
                    \x20 NBD (unix):  nbd+unix:///bench?socket=/d/nbd.sock\n\
                    \x20 NVMe/TCP:    127.0.0.1:4002 subsystem nqn.x:bench\n\
                    \x20 Control API: /d/control.sock (basalt volume --control /d/control.sock ls)\n\
                    \x20 S3:          http://127.0.0.1:4003 (access key in /d/s3-credentials, profile \"basalt\")\n\
                    \x20 Metrics:     http://127.0.0.1:4004/metrics\n\
                    Try:\n\
                    Press Ctrl-C to stop.\n\
                    \x20 S3:          http://after.the.banner:1\n";
        let mut banner = Banner::default();
        let ready = text.lines().position(|l| banner.take(l));
        assert_eq!(ready, Some(8));
        assert_eq!(
            banner,
            Banner {
                line: Some(
                    "Basalt is up: 3 OSDs, pool \"rbd\" (3 replicas, 32 PGs), data in /d".into()
                ),
                nbd_uri: "nbd://127.0.0.1:4001/bench".into(),
                control: Some("/d/control.sock".into()),
                nvmf: Some("127.0.0.1:4002".parse().unwrap()),
                metrics: Some("127.0.0.1:4004".into()),
                s3_url: Some("http://127.0.0.1:4003".into()),
            }
        );
    }
}
