//! Shared harness of the end-to-end tests: a real `basalt up` process per test, and helpers
//! that run the real NBD clients (qemu-io, qemu-img, nbdcopy, nbdinfo, fio) with time bounds.
//!
//! Every child process is bounded in time and killed on drop, so a failing or hanging test
//! never leaves a daemon or a client behind.

// Each test file uses a different subset of the helpers.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long `basalt up` may take to become ready (write its ready file).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `basalt up` may take to exit after SIGTERM.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Default bound on one client command (qemu-io, nbdinfo, `basalt volume` ...).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);
/// Capacity of each OSD store file (sparse).
pub const OSD_SIZE: &str = "2G";
/// Size of the default volume `vol0` (the contract's default).
pub const VOL0_BYTES: u64 = 1 << 30;

/// How long to wait for the daemon's pipes to reach end-of-file after it exited.
const READER_JOIN_TIMEOUT: Duration = Duration::from_secs(5);

/// A running `basalt up` with its own data directory; killed (SIGKILL) on drop.
pub struct Cluster {
    /// Owns the data directory (removed on drop).
    dir: tempfile::TempDir,
    extra_args: Vec<String>,
    child: Option<Child>,
    /// Everything the daemon wrote on stderr, across restarts.
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Everything the daemon wrote on stdout, across restarts.
    stdout: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
    /// NBD TCP address, e.g. `127.0.0.1:34567`.
    pub nbd_addr: SocketAddr,
    /// NBD unix socket path.
    pub nbd_socket: PathBuf,
    /// Path of the control socket (a string: it goes on command lines as is).
    pub control: String,
    /// S3 API address.
    pub s3_addr: Option<SocketAddr>,
    /// `/metrics` address (None with `--metrics-listen off`).
    pub metrics_addr: Option<SocketAddr>,
    /// NVMe/TCP target address (None without `--nvmf-listen`).
    pub nvmf_addr: Option<SocketAddr>,
}

impl Cluster {
    /// Start a fresh cluster (3 OSDs, 3 replicas, `vol0` of 1 GiB) on ephemeral ports.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Start a fresh cluster, adding `extra` to the `basalt up` arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("basalt-e2e-")
            .tempdir()
            .expect("create the cluster's temporary data directory");
        let mut cluster = Cluster {
            dir,
            extra_args: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
            stderr: Arc::new(Mutex::new(Vec::new())),
            stdout: Arc::new(Mutex::new(Vec::new())),
            readers: Vec::new(),
            nbd_addr: "0.0.0.0:0".parse().expect("valid address"),
            nbd_socket: PathBuf::new(),
            control: String::new(),
            s3_addr: None,
            metrics_addr: None,
            nvmf_addr: None,
        };
        cluster.spawn();
        cluster
    }

    /// The data directory (`--data-dir`).
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// A scratch directory for test files, inside the cluster's temporary directory.
    pub fn scratch(&self) -> PathBuf {
        let p = self.dir.path().join("scratch");
        std::fs::create_dir_all(&p).expect("create scratch directory");
        p
    }

    /// The TCP NBD URI of export `name`.
    pub fn uri(&self, name: &str) -> String {
        format!("nbd://{}/{}", self.nbd_addr, name)
    }

    /// The unix-socket NBD URI of export `name`.
    pub fn unix_uri(&self, name: &str) -> String {
        format!("nbd+unix:///{}?socket={}", name, self.nbd_socket.display())
    }

    /// The TCP NBD URI of the server (no export: for `nbdinfo --list`).
    pub fn server_uri(&self) -> String {
        format!("nbd://{}", self.nbd_addr)
    }

    /// The daemon's stderr so far (lossy UTF-8).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().expect("stderr buffer")).into_owned()
    }

    /// Wait up to `timeout` for `needle` to appear in the daemon's stderr. A line is logged
    /// after the effect it reports and reaches the buffer through a reader thread, so a test
    /// that has just observed the effect must wait for the line, not look once.
    pub fn wait_for_stderr(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        // Loop bound: `timeout`.
        loop {
            if self.stderr_text().contains(needle) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The daemon's stdout so far, across restarts (lossy UTF-8).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().expect("stdout buffer")).into_owned()
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("basalt up is running").id()
    }

    /// Where `basalt up` writes its ready file (`--ready-file`).
    fn ready_file(&self) -> PathBuf {
        self.dir.path().join("ready.json")
    }

    /// Start `basalt up` and wait for its ready file: the endpoints it serves, written once
    /// everything serves (the banner is for people).
    fn spawn(&mut self) {
        assert!(
            self.child.is_none(),
            "spawn while basalt up is still running"
        );
        let ready_file = self.ready_file();
        let _ = std::fs::remove_file(&ready_file);
        let bin = env!("CARGO_BIN_EXE_basalt");
        let mut cmd = Command::new(bin);
        cmd.arg("up")
            .arg("--data-dir")
            .arg(self.dir.path())
            .arg("--ready-file")
            .arg(&ready_file)
            .args(["--nbd-listen", "127.0.0.1:0"])
            .args(["--s3-listen", "127.0.0.1:0"])
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The default store size, unless the test chose its own.
        if !self.extra_args.iter().any(|a| a == "--osd-size") {
            cmd.args(["--osd-size", OSD_SIZE]);
        }
        // Small WALs: each is allocated on disk, and several clusters share this one.
        if !self.extra_args.iter().any(|a| a == "--wal-size") {
            cmd.args(["--wal-size", basalt_testcluster::basalt::TEST_WAL_SIZE]);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {bin} up: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        // Drain both pipes forever so the daemon never blocks on a full one.
        for (mut pipe, buf) in [
            (
                Box::new(stdout) as Box<dyn Read + Send>,
                self.stdout.clone(),
            ),
            (Box::new(stderr), self.stderr.clone()),
        ] {
            self.readers.push(std::thread::spawn(move || {
                let mut chunk = [0u8; 8192];
                loop {
                    match pipe.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf
                            .lock()
                            .expect("pipe buffer")
                            .extend_from_slice(&chunk[..n]),
                    }
                }
            }));
        }
        self.child = Some(child);

        let deadline = Instant::now() + STARTUP_TIMEOUT;
        // Bound: STARTUP_TIMEOUT of 50 ms polls. The file appears whole (renamed into place).
        let ready: serde_json::Value = loop {
            if let Ok(bytes) = std::fs::read(&ready_file) {
                match serde_json::from_slice(&bytes) {
                    Ok(v) => break v,
                    Err(e) => self.fail_startup(&format!("unreadable ready file: {e}")),
                }
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                std::thread::sleep(Duration::from_millis(200));
                self.fail_startup(&format!("exited with {status} before it was ready"));
            }
            if Instant::now() >= deadline {
                self.fail_startup(&format!("no ready file within {STARTUP_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let text = |key: &str| ready[key].as_str().map(str::to_string);
        let addr = |key: &str| text(key).and_then(|t| t.parse::<SocketAddr>().ok());
        match (addr("nbd_tcp"), text("nbd_socket"), text("control_socket")) {
            (Some(a), Some(s), Some(c)) => {
                self.nbd_addr = a;
                self.nbd_socket = PathBuf::from(s);
                self.control = c;
                self.s3_addr = addr("s3");
                self.metrics_addr = addr("metrics");
                self.nvmf_addr = addr("nvmf");
            }
            _ => self.fail_startup(&format!("ready file incomplete: {ready}")),
        }
        // The banner (for people) is printed around the time the ready file appears and
        // reaches our pipe reader a moment later: tests that read it wait for its last line.
        // Bound: STARTUP_TIMEOUT of 20 ms polls.
        while !self.stdout_text().contains("Press Ctrl-C to stop.") {
            if Instant::now() >= deadline {
                self.fail_startup(&format!(
                    "ready, but no complete banner on stdout within {STARTUP_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn fail_startup(&mut self, why: &str) -> ! {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.join_readers();
        panic!(
            "basalt up failed to start: {why}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            String::from_utf8_lossy(&self.stdout.lock().expect("stdout buffer")),
            self.stderr_text()
        );
    }

    /// Join the pipe readers once the child is dead. Bounded: a grandchild that inherited the
    /// pipes could keep them open; such a reader is left detached rather than waited for.
    fn join_readers(&mut self) {
        let deadline = Instant::now() + READER_JOIN_TIMEOUT;
        for h in self.readers.drain(..) {
            while !h.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }

    /// Stop with SIGTERM; assert a clean exit (status 0, "basalt: stopped cleanly").
    pub fn stop(&mut self) {
        let status = self.signal_and_wait("TERM");
        let stderr = self.stderr_text();
        assert!(
            status.success(),
            "basalt up exited with {status} after SIGTERM\n--- stderr ---\n{stderr}"
        );
        assert!(
            stderr.contains("basalt: stopped cleanly"),
            "no \"basalt: stopped cleanly\" on stderr after SIGTERM\n--- stderr ---\n{stderr}"
        );
    }

    /// Send SIGTERM and return the exit status (for tests that check it themselves).
    pub fn signal_and_wait(&mut self, signal: &str) -> ExitStatus {
        let pid = self.pid();
        let st = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -{signal} {pid} failed: {st}");
        let mut child = self.child.take().expect("running");
        let status = wait_timeout(&mut child, SHUTDOWN_TIMEOUT).unwrap_or_else(|| {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "basalt up did not exit within {SHUTDOWN_TIMEOUT:?} of SIGTERM\n--- stderr ---\n{}",
                self.stderr_text()
            )
        });
        self.join_readers();
        status
    }

    /// Kill the daemon with SIGKILL (a crash: nothing is flushed by the daemon itself).
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("basalt up is running");
        child.kill().expect("SIGKILL basalt up");
        let _ = child.wait();
        self.join_readers();
    }

    /// Start again on the same data directory (after `stop` or `kill9`); new ports.
    pub fn restart(&mut self) {
        self.spawn();
    }

    /// Like `restart`, but a failed start (the daemon exits or never prints its banner) is
    /// returned as the failure report instead of failing the test.
    pub fn try_restart(&mut self) -> Result<(), String> {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.spawn()));
        r.map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "basalt up failed to start".to_string())
        })
    }

    /// Run `basalt volume --control ADDR ARGS...` and return its output.
    pub fn volume(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt"));
        cmd.arg("volume")
            .arg("--control")
            .arg(&self.control)
            .args(args);
        run(&mut cmd, CLIENT_TIMEOUT)
    }

    /// Bytes used on all OSDs (every replica counted), from `basalt status --json`.
    pub fn used_bytes(&self) -> u64 {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt"));
        cmd.args(["status", "--json", "--interval", "0", "--control"])
            .arg(&self.control);
        let out = run(&mut cmd, CLIENT_TIMEOUT);
        assert_ok(&out, "basalt status --json");
        let status = parse_json(&out.stdout, "basalt status --json");
        status["osds"]
            .as_array()
            .expect("osds")
            .iter()
            .map(|o| o["stats"]["used_bytes"].as_u64().expect("used_bytes"))
            .sum()
    }

    /// `basalt status` as text (no rates).
    pub fn status_text(&self) -> String {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt"));
        cmd.args(["status", "--interval", "0", "--control"])
            .arg(&self.control);
        let out = run(&mut cmd, CLIENT_TIMEOUT);
        assert_ok(&out, "basalt status");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run `basalt volume ...` and assert it succeeded; returns stdout.
    pub fn volume_ok(&self, args: &[&str]) -> String {
        let out = self.volume(args);
        assert_ok(&out, &format!("basalt volume {}", args.join(" ")));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.join_readers();
        if std::thread::panicking() {
            eprintln!(
                "--- basalt up stderr ({}) ---\n{}\n--- end of basalt up stderr ---",
                self.dir.path().display(),
                self.stderr_text()
            );
        }
    }
}

/// Wait for `child` at most `timeout`; `None` if it is still running.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(e) => panic!("wait for child {}: {e}", child.id()),
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Path of `tool` in PATH, if installed.
pub fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    // Also look in the sbin directories, where mkfs/fsck/losetup live on Debian.
    let extra = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from);
    std::env::split_paths(&path)
        .chain(extra)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Panic with a clear message unless `tool` is installed (a missing client fails the test).
pub fn require_tool(tool: &str, package: &str) -> PathBuf {
    find_tool(tool).unwrap_or_else(|| {
        panic!(
            "required client `{tool}` is not installed (Debian package {package}; \
             the README's setup script installs it)"
        )
    })
}

/// Run `cmd` with stdout/stderr captured, killing it after `timeout`.
pub fn run(cmd: &mut Command, timeout: Duration) -> Output {
    let desc = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = match wait_timeout(&mut child, timeout) {
        Some(s) => s,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            let stdout = out_t.join().unwrap_or_default();
            let stderr = err_t.join().unwrap_or_default();
            panic!(
                "{desc} did not finish within {timeout:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                String::from_utf8_lossy(&stdout),
                String::from_utf8_lossy(&stderr)
            );
        }
    };
    Output {
        status,
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
    }
}

/// Assert `out` is a success; the message shows both streams.
pub fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Text of both streams of `out`.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Run `qemu-io -f raw -c CMD... URI`; returns the output (not checked). Snapshot and image
/// exports (`VOLUME@SNAPSHOT`, `image:NAME`) are read-only and QEMU refuses to open those
/// read-write, so they are opened with `-r`.
pub fn qemu_io<S: AsRef<str>>(uri: &str, cmds: &[S]) -> Output {
    let bin = require_tool("qemu-io", "qemu-utils");
    let mut cmd = Command::new(bin);
    cmd.args(["-f", "raw"]);
    // The export name: after the authority, before the query.
    let export = uri
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('/'))
        .map(|(_, path)| path.split('?').next().unwrap_or(""))
        .unwrap_or("");
    if export.contains('@') || export.starts_with("image:") {
        cmd.arg("-r");
    }
    for c in cmds {
        cmd.arg("-c").arg(c.as_ref());
    }
    cmd.arg(uri);
    run(&mut cmd, CLIENT_TIMEOUT)
}

/// Run qemu-io commands and assert every one succeeded and every pattern verified.
///
/// qemu-io prints one line per completed command ("wrote N/N bytes", "read N/N bytes",
/// "discard N/N bytes"); an I/O error prints a "failed" line instead. We check the count of
/// such lines (`aio_write` prints its line on completion too), since qemu-io's exit status alone does not reflect a failed command in every
/// version.
pub fn qemu_io_ok<S: AsRef<str>>(uri: &str, cmds: &[S]) -> String {
    let out = qemu_io(uri, cmds);
    let all = text(&out);
    let list: Vec<&str> = cmds.iter().map(|c| c.as_ref()).collect();
    let what = format!("qemu-io {list:?} {uri}");
    assert_ok(&out, &what);
    assert!(
        !all.contains("Pattern verification failed"),
        "{what}: pattern verification failed:\n{all}"
    );
    assert!(
        !all.to_lowercase().contains("failed"),
        "{what}: a command failed:\n{all}"
    );
    let done = all
        .lines()
        .filter(|l| {
            (l.starts_with("wrote ") || l.starts_with("read ") || l.starts_with("discard "))
                && l.contains(" bytes at offset ")
        })
        .count();
    // `flush` and `aio_flush` print nothing when they succeed.
    let expected = list
        .iter()
        .filter(|c| !matches!(c.split_whitespace().next(), Some("flush" | "aio_flush")))
        .count();
    assert_eq!(
        done, expected,
        "{what}: expected {expected} completed commands:\n{all}"
    );
    all
}

/// A deterministic pseudo-random byte stream (xorshift64*), so failures reproduce.
pub fn pseudo_random(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Compare two buffers; on mismatch report the first differing offset (not megabytes of hex).
pub fn assert_same_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: length {} differs from the expected {}",
        got.len(),
        want.len()
    );
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        let end = (i + 16).min(got.len());
        panic!(
            "{what}: first difference at byte {i} (0x{i:x}): got {:02x?}, want {:02x?}",
            &got[i..end],
            &want[i..end]
        );
    }
}

/// Read the first `len` bytes of export `uri` into `dest` with `qemu-img dd`.
pub fn read_export_prefix(uri: &str, len_mib: u64, dest: &Path) -> Vec<u8> {
    let bin = require_tool("qemu-img", "qemu-utils");
    let _ = std::fs::remove_file(dest);
    let out = run(
        Command::new(bin)
            .args(["dd", "-f", "raw", "-O", "raw", "bs=1M"])
            .args([
                format!("count={len_mib}"),
                format!("if={uri}"),
                format!("of={}", dest.display()),
            ]),
        CLIENT_TIMEOUT,
    );
    assert_ok(
        &out,
        &format!("qemu-img dd of the first {len_mib} MiB of {uri}"),
    );
    std::fs::read(dest).expect("read qemu-img dd output")
}

/// Parse the JSON that `nbdinfo --json` (or fio) printed, skipping any text before the `{`.
pub fn parse_json(out: &[u8], what: &str) -> serde_json::Value {
    let s = String::from_utf8_lossy(out);
    let start = s
        .find(['{', '['])
        .unwrap_or_else(|| panic!("{what}: no JSON in output:\n{s}"));
    serde_json::from_str(&s[start..]).unwrap_or_else(|e| panic!("{what}: bad JSON ({e}):\n{s}"))
}

/// Size of export `uri` as `nbdinfo --size` reports it.
pub fn nbd_size(uri: &str) -> u64 {
    let bin = require_tool("nbdinfo", "libnbd-bin");
    let out = run(Command::new(bin).args(["--size", uri]), CLIENT_TIMEOUT);
    assert_ok(&out, &format!("nbdinfo --size {uri}"));
    let s = String::from_utf8_lossy(&out.stdout);
    s.trim()
        .parse()
        .unwrap_or_else(|e| panic!("nbdinfo --size {uri} printed {s:?}: {e}"))
}

/// Names of the exports `nbdinfo --list --json` shows on the server at `server_uri`.
pub fn nbd_list(server_uri: &str) -> Vec<String> {
    let bin = require_tool("nbdinfo", "libnbd-bin");
    let out = run(
        Command::new(bin).args(["--list", "--json", server_uri]),
        CLIENT_TIMEOUT,
    );
    assert_ok(&out, &format!("nbdinfo --list --json {server_uri}"));
    let v = parse_json(&out.stdout, "nbdinfo --list --json");
    v["exports"]
        .as_array()
        .unwrap_or_else(|| panic!("nbdinfo --list --json has no exports array: {v}"))
        .iter()
        .map(|e| {
            e["export-name"]
                .as_str()
                .unwrap_or_else(|| panic!("export without export-name: {e}"))
                .to_string()
        })
        .collect()
}

/// An interactive `qemu-io` that keeps one NBD connection open across commands (it flushes
/// only when it closes the image); killed on drop.
pub struct QemuIoSession {
    child: Child,
    stdin: std::process::ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl QemuIoSession {
    /// Connect to `uri`.
    pub fn open(uri: &str) -> QemuIoSession {
        let bin = require_tool("qemu-io", "qemu-utils");
        let mut child = Command::new(bin)
            .args(["-f", "raw", uri])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn qemu-io");
        let stdin = child.stdin.take().expect("stdin");
        let (tx, lines) = mpsc::channel::<String>();
        for stream in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { return };
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            });
        }
        QemuIoSession {
            child,
            stdin,
            lines,
        }
    }

    /// Run one read/write/discard command; returns its result line: "wrote ...", "read ...",
    /// "discard ..." on success, or the line saying it failed.
    pub fn cmd(&mut self, cmd: &str) -> String {
        use std::io::Write;
        writeln!(self.stdin, "{cmd}").expect("send a command to qemu-io");
        self.stdin.flush().expect("flush qemu-io stdin");
        let mut seen = Vec::new();
        for _ in 0..100 {
            match self.lines.recv_timeout(CLIENT_TIMEOUT) {
                Ok(line) => {
                    let l = line.trim_start_matches("qemu-io> ").to_string();
                    let done = ["wrote ", "read ", "discard "]
                        .iter()
                        .any(|p| l.starts_with(p) && l.contains(" bytes at offset "));
                    if done || l.contains("failed") || l.contains("rror") {
                        return l;
                    }
                    seen.push(l);
                }
                Err(e) => panic!("qemu-io `{cmd}`: no result ({e}); saw {seen:?}"),
            }
        }
        panic!("qemu-io `{cmd}`: no result in 100 lines: {seen:?}");
    }
}

impl Drop for QemuIoSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The test guest (kernel, initrd, image) built by scripts/build-guest-image.sh into
/// target/guest, kept while up to date.
pub fn guest_image() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = root.join("target/guest");
    let built = run(
        Command::new(root.join("scripts/build-guest-image.sh")).arg(&out),
        Duration::from_secs(600),
    );
    assert_ok(&built, "scripts/build-guest-image.sh");
    out
}

/// Boot the test guest from `uri` (its console into `console`), running fio `fio_s` s.
pub fn boot_guest(guest: &Path, uri: &str, name: &str, fio_s: u32, console: &Path) -> Child {
    require_tool("qemu-system-x86_64", "qemu-system-x86");
    basalt_bench::guest::qemu_command(guest, uri, name, fio_s)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(console).expect("console file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("start qemu")
}

/// Bound on one `openssl` invocation (certificates of the TLS tests).
pub const OPENSSL_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `openssl ARGS` in `dir`; it must succeed.
pub fn openssl(dir: &Path, args: &[&str]) {
    let bin = require_tool("openssl", "openssl");
    let out = run(
        Command::new(bin).current_dir(dir).args(args),
        OPENSSL_TIMEOUT,
    );
    assert_ok(&out, &format!("openssl {args:?}"));
}

/// A key pair and a certificate for `cn` with the extensions in `ext`, signed by the CA
/// `ca` (a name prefix: `ca-cert.pem`, `ca-key.pem` of `dir`), or self-signed when `ca` is
/// None. Files: `{name}-key.pem`, `{name}-cert.pem`.
pub fn issue(dir: &Path, name: &str, cn: &str, ext: &str, ca: Option<&str>) {
    let key = format!("{name}-key.pem");
    let csr = format!("{name}.csr");
    let cert = format!("{name}-cert.pem");
    let extfile = format!("{name}.ext");
    std::fs::write(dir.join(&extfile), ext).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN={cn}"),
        ],
    );
    let mut args = vec!["x509", "-req", "-in", &csr, "-days", "30", "-out", &cert];
    args.extend(["-extfile", &extfile]);
    let (ca_cert, ca_key);
    match ca {
        Some(ca) => {
            ca_cert = format!("{ca}-cert.pem");
            ca_key = format!("{ca}-key.pem");
            args.extend(["-CA", &ca_cert, "-CAkey", &ca_key, "-CAcreateserial"]);
        }
        None => args.extend(["-signkey", &key]),
    }
    openssl(dir, &args);
}

pub const CA_EXT: &str =
    "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n";
// qemu checks that leaf certificates allow key encipherment as well as signatures.
pub const SERVER_EXT: &str =
    "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
    extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n";
