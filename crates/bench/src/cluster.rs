//! The `basalt up` process under test: started from the current executable, its endpoints
//! read from its ready file (`basalt up --ready-file`), its CPU time read from /proc (see
//! `cpu`), and stopped when dropped.

use anyhow::{bail, Context};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long `basalt up` may take to become ready (write its ready file).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `basalt up` may take to exit after SIGTERM before it is killed.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(15);
/// How often the ready file is looked for while `basalt up` starts.
const READY_POLL: Duration = Duration::from_millis(50);

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
    /// More `basalt up` arguments (the store's I/O mode).
    pub up_args: Vec<String>,
}

/// A running `basalt up`; SIGTERM then SIGKILL on drop.
pub struct UpProcess {
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

impl UpProcess {
    /// Start `basalt up` with its state in `data_dir` and its log in `log`, and wait (bounded)
    /// until it serves.
    pub fn start(data_dir: &Path, log: &Path, config: &ClusterConfig) -> anyhow::Result<UpProcess> {
        let exe = std::env::current_exe().context("find the basalt executable")?;
        UpProcess::start_exe(&exe, data_dir, log, config)
    }

    /// [`UpProcess::start`] with the `basalt` executable `exe` (another build, to compare).
    pub fn start_exe(
        exe: &Path,
        data_dir: &Path,
        log: &Path,
        config: &ClusterConfig,
    ) -> anyhow::Result<UpProcess> {
        UpProcess::start_exe_with(exe, data_dir, log, config, &[])
    }

    /// [`UpProcess::start_exe`] with `extra` arguments to `basalt up`.
    pub fn start_exe_with(
        exe: &Path,
        data_dir: &Path,
        log: &Path,
        config: &ClusterConfig,
        extra: &[&str],
    ) -> anyhow::Result<UpProcess> {
        let log_file =
            std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
        // Beside the log: one per run. A file left by an earlier run must not pass for this
        // run's (basalt up also removes it when it starts, but after this process looks).
        let ready_file = log.with_extension("ready.json");
        match std::fs::remove_file(&ready_file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("remove {}", ready_file.display()))
            }
            _ => {}
        }
        let mut child = Command::new(exe)
            .arg("up")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--ready-file")
            .arg(&ready_file)
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
            .args(&config.up_args)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .context("start basalt up")?;
        let stdout = child.stdout.take().context("basalt up stdout")?;
        // From here on the guard stops the process on every error path.
        let mut cluster = UpProcess {
            child,
            uri: String::new(),
            banner: None,
            s3: None,
            control: None,
            nvmf: None,
            metrics: None,
        };
        let headline = drain_stdout(stdout);
        let ready = Ready::wait(&mut cluster.child, &ready_file, log)?;
        let Some(uri) = ready.nbd_uri.filter(|u| u.starts_with("nbd://")) else {
            bail!("basalt up's ready file names no NBD address of the volume `bench`");
        };
        cluster.s3 = match (ready.s3_url, ready.s3_credentials) {
            (Some(url), Some(path)) => {
                let key = basalt_s3client::Credentials::load_profile(&path, Some("basalt"))
                    .context("read the S3 key `basalt up` wrote")?;
                Some(crate::under_test::S3Endpoint {
                    url,
                    access_key: key.access_key,
                    secret_key: key.secret_key,
                })
            }
            (Some(_), None) => bail!("basalt up's ready file names S3 but no credentials file"),
            (None, _) => None,
        };
        cluster.uri = uri;
        cluster.banner = headline.lock().ok().and_then(|h| h.clone());
        cluster.control = Some(ready.control_socket.display().to_string());
        cluster.nvmf = ready.nvmf;
        cluster.metrics = ready.metrics.map(|a| a.to_string());
        Ok(cluster)
    }

    /// Process id of `basalt up`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// The part of `basalt up`'s ready file (format version 1, docs/cli.md) the bench uses.
#[derive(Debug, serde::Deserialize)]
struct Ready {
    version: u32,
    /// `nbd://127.0.0.1:PORT/bench`.
    nbd_uri: Option<String>,
    control_socket: PathBuf,
    nvmf: Option<std::net::SocketAddr>,
    /// The `/metrics` endpoint.
    metrics: Option<std::net::SocketAddr>,
    /// `http://IP:PORT` of the S3 gateway.
    s3_url: Option<String>,
    s3_credentials: Option<PathBuf>,
}

impl Ready {
    /// Wait (bounded by [`STARTUP_TIMEOUT`]) until `child` has written `path`; an exit before
    /// that is an error naming `log`.
    fn wait(child: &mut Child, path: &Path, log: &Path) -> anyhow::Result<Ready> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            // The file is renamed into place whole, so a file that exists is complete.
            if let Ok(bytes) = std::fs::read(path) {
                let ready: Ready = serde_json::from_slice(&bytes)
                    .with_context(|| format!("parse basalt up's ready file {}", path.display()))?;
                if ready.version != 1 {
                    bail!(
                        "basalt up's ready file has format version {}, the bench reads 1",
                        ready.version
                    );
                }
                return Ok(ready);
            }
            if let Some(status) = child.try_wait()? {
                bail!(
                    "basalt up exited ({status}) during start-up (log: {})",
                    log.display()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "basalt up was not ready within {} s (log: {})",
                    STARTUP_TIMEOUT.as_secs(),
                    log.display()
                );
            }
            std::thread::sleep(READY_POLL);
        }
    }
}

/// Drain `basalt up`'s stdout (so it never blocks on it) in a thread; the "Basalt is up: ..."
/// line, for the report, lands in the returned cell once printed.
fn drain_stdout(stdout: std::process::ChildStdout) -> Arc<Mutex<Option<String>>> {
    let headline = Arc::new(Mutex::new(None));
    let cell = headline.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("Basalt is up") {
                if let Ok(mut h) = cell.lock() {
                    *h = Some(line);
                }
            }
        }
    });
    headline
}

impl Drop for UpProcess {
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

impl crate::under_test::UnderTest for UpProcess {
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

    /// Goal: the bench reads every address it uses from a ready file as `basalt up` writes
    /// it (the example of docs/cli.md), ignoring fields it does not use.
    #[test]
    fn reads_the_ready_file() {
        let text = r#"{"version":1,"pid":7,"data_dir":"/d","pool":"rbd","osds":3,
            "default_volume":"bench","nbd_tcp":"127.0.0.1:4001","nbd_socket":"/d/nbd.sock",
            "control_socket":"/d/control.sock","s3":"127.0.0.1:4003",
            "s3_credentials":"/d/s3-credentials","metrics":"127.0.0.1:4004",
            "nvmf":"127.0.0.1:4002","s3_url":"http://127.0.0.1:4003",
            "nbd_uri":"nbd://127.0.0.1:4001/bench"}"#;
        let ready: Ready = serde_json::from_str(text).unwrap();
        assert_eq!(ready.version, 1);
        assert_eq!(ready.nbd_uri.as_deref(), Some("nbd://127.0.0.1:4001/bench"));
        assert_eq!(ready.control_socket, Path::new("/d/control.sock"));
        assert_eq!(ready.nvmf, Some("127.0.0.1:4002".parse().unwrap()));
        assert_eq!(ready.metrics, Some("127.0.0.1:4004".parse().unwrap()));
        assert_eq!(ready.s3_url.as_deref(), Some("http://127.0.0.1:4003"));
        assert_eq!(
            ready.s3_credentials.as_deref(),
            Some(Path::new("/d/s3-credentials"))
        );
    }
}
