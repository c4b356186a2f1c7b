//! Shared test fixtures: an in-process server on 127.0.0.1:0 and a unix socket, test devices
//! with injected delays and failures, a blocking raw-socket NBD client, and client-tool runners.
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use basalt_nbd::wire::*;
use basalt_nbd::{BlockDevice, DeviceError, ExportMap, Extent, MemDevice, Server, ServerConfig};
use bytes::Bytes;

/// A server running on its own runtime, listening on TCP and on a unix socket.
pub struct TestServer {
    pub server: Arc<Server>,
    pub exports: Arc<ExportMap>,
    pub port: u16,
    pub socket: PathBuf,
    rt: Option<tokio::runtime::Runtime>,
    tasks: Vec<tokio::task::JoinHandle<std::io::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    /// Start a server with no exports and a short shutdown grace.
    pub fn start() -> Self {
        Self::start_with(ServerConfig {
            max_connections: 64,
            shutdown_grace: Duration::from_secs(2),
            ..ServerConfig::default()
        })
    }

    /// Start a server with no exports and the given tunables.
    pub fn start_with(config: ServerConfig) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("build test runtime");
        let dir = tempfile::tempdir().expect("create temp dir");
        let socket = dir.path().join("nbd.sock");
        let exports = Arc::new(ExportMap::new());
        let server = Server::with_config(exports.clone(), config);
        let (tcp, unix) = rt.block_on(async {
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind tcp");
            let unix = tokio::net::UnixListener::bind(&socket).expect("bind unix socket");
            (tcp, unix)
        });
        let port = tcp.local_addr().expect("local addr").port();
        let tasks = vec![
            rt.spawn(server.clone().serve_tcp(tcp)),
            rt.spawn(server.clone().serve_unix(unix)),
        ];
        TestServer {
            server,
            exports,
            port,
            socket,
            rt: Some(rt),
            tasks,
            _dir: dir,
        }
    }

    /// Add a fresh writable MemDevice export and return it.
    pub fn add_mem(&self, name: &str, size: u64) -> Arc<MemDevice> {
        let dev = Arc::new(MemDevice::new(size));
        self.exports
            .insert(name, format!("test export {name}"), dev.clone());
        dev
    }

    /// Add any device as an export.
    pub fn add(&self, name: &str, dev: Arc<dyn BlockDevice>) {
        self.exports
            .insert(name, format!("test export {name}"), dev);
    }

    pub fn uri(&self, name: &str) -> String {
        format!("nbd://127.0.0.1:{}/{name}", self.port)
    }

    pub fn unix_uri(&self, name: &str) -> String {
        format!("nbd+unix:///{name}?socket={}", self.socket.display())
    }

    /// Run a future on the server's runtime (e.g. to await something of the server).
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.as_ref().expect("runtime").block_on(f)
    }

    /// Shut down and wait for both listeners to finish; returns how long that took.
    pub fn stop(mut self) -> Duration {
        let started = std::time::Instant::now();
        self.server.shutdown();
        let tasks = std::mem::take(&mut self.tasks);
        self.block_on(async {
            for t in tasks {
                let r = tokio::time::timeout(Duration::from_secs(10), t).await;
                let r = r
                    .expect("listener finished within 10 s")
                    .expect("listener task");
                r.expect("listener result");
            }
        });
        started.elapsed()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.server.shutdown();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

/// A MemDevice whose reads and writes at or past `slow_from` take `delay`.
pub struct SlowDevice {
    pub inner: MemDevice,
    pub slow_from: u64,
    pub delay: Duration,
}

impl SlowDevice {
    async fn maybe_sleep(&self, offset: u64) {
        if offset >= self.slow_from {
            tokio::time::sleep(self.delay).await;
        }
    }
}

#[async_trait]
impl BlockDevice for SlowDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    async fn read(&self, offset: u64, len: u32) -> Result<Bytes, DeviceError> {
        self.maybe_sleep(offset).await;
        self.inner.read(offset, len).await
    }
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
        self.maybe_sleep(offset).await;
        self.inner.write(offset, data, fua).await
    }
    async fn flush(&self) -> Result<(), DeviceError> {
        self.inner.flush().await
    }
    async fn trim(&self, offset: u64, len: u32, fua: bool) -> Result<(), DeviceError> {
        self.inner.trim(offset, len, fua).await
    }
    async fn write_zeroes(&self, o: u64, l: u32, t: bool, f: bool) -> Result<(), DeviceError> {
        self.inner.write_zeroes(o, l, t, f).await
    }
    async fn block_status(&self, offset: u64, len: u32) -> Result<Vec<Extent>, DeviceError> {
        self.inner.block_status(offset, len).await
    }
}

/// A device whose every operation at or past `bad_from` fails with an I/O error, and whose
/// reads at `short_at` return one byte too few (a buggy device the server must not trust).
pub struct FailingDevice {
    pub inner: MemDevice,
    pub bad_from: u64,
    pub short_at: u64,
}

#[async_trait]
impl BlockDevice for FailingDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    async fn read(&self, offset: u64, len: u32) -> Result<Bytes, DeviceError> {
        if offset == self.short_at {
            let data = self.inner.read(offset, len).await?;
            return Ok(data.slice(..data.len().saturating_sub(1)));
        }
        if offset >= self.bad_from {
            return Err(DeviceError::Io("injected read failure".into()));
        }
        self.inner.read(offset, len).await
    }
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
        if offset >= self.bad_from {
            return Err(DeviceError::NoSpace);
        }
        self.inner.write(offset, data, fua).await
    }
    async fn flush(&self) -> Result<(), DeviceError> {
        Err(DeviceError::Io("injected flush failure".into()))
    }
    async fn trim(&self, offset: u64, len: u32, fua: bool) -> Result<(), DeviceError> {
        self.inner.trim(offset, len, fua).await
    }
    async fn write_zeroes(&self, o: u64, l: u32, t: bool, f: bool) -> Result<(), DeviceError> {
        self.inner.write_zeroes(o, l, t, f).await
    }
    async fn block_status(&self, _offset: u64, _len: u32) -> Result<Vec<Extent>, DeviceError> {
        Ok(Vec::new()) // describes nothing: the server must still send one descriptor
    }
}

/// One structured reply chunk as received.
#[derive(Debug)]
pub struct Chunk {
    pub flags: u16,
    pub kind: u16,
    pub handle: u64,
    pub payload: Vec<u8>,
}

/// A blocking, byte-level NBD client for malformed-input tests.
pub struct RawClient {
    pub s: TcpStream,
}

impl RawClient {
    /// Connect and check the greeting; the client flags are not sent yet.
    pub fn connect(port: u16) -> Self {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut c = RawClient { s };
        let g = c.read_n(18);
        assert_eq!(&g[0..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(
            u16::from_be_bytes([g[16], g[17]]),
            FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES
        );
        c
    }

    /// Connect and send the usual client flags (fixed newstyle, no zeroes).
    pub fn negotiating(port: u16) -> Self {
        let mut c = Self::connect(port);
        c.send(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes());
        c
    }

    pub fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).expect("send");
    }

    pub fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.s.read_exact(&mut b).expect("read from server");
        b
    }

    pub fn u16(&mut self) -> u16 {
        let b = self.read_n(2);
        u16::from_be_bytes([b[0], b[1]])
    }

    pub fn u32(&mut self) -> u32 {
        let b = self.read_n(4);
        u32::from_be_bytes(b.try_into().expect("read_n(4) gives 4 bytes"))
    }

    pub fn u64(&mut self) -> u64 {
        let b = self.read_n(8);
        u64::from_be_bytes(b.try_into().expect("read_n(8) gives 8 bytes"))
    }

    pub fn send_option(&mut self, code: u32, data: &[u8]) {
        let mut m = Vec::with_capacity(16 + data.len());
        m.extend_from_slice(&IHAVEOPT.to_be_bytes());
        m.extend_from_slice(&code.to_be_bytes());
        m.extend_from_slice(&(data.len() as u32).to_be_bytes());
        m.extend_from_slice(data);
        self.send(&m);
    }

    /// Read one option reply: (option, reply type, data).
    pub fn option_reply(&mut self) -> (u32, u32, Vec<u8>) {
        assert_eq!(self.u64(), OPTION_REPLY_MAGIC);
        let opt = self.u32();
        let kind = self.u32();
        let len = self.u32() as usize;
        (opt, kind, self.read_n(len))
    }

    /// Option data naming an export with no info requests (INFO/GO layout).
    pub fn export_data(name: &str) -> Vec<u8> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&0u16.to_be_bytes());
        d
    }

    /// Option data for LIST/SET_META_CONTEXT.
    pub fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in queries {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q.as_bytes());
        }
        d
    }

    /// Negotiate (optionally structured replies and base:allocation) and GO; returns
    /// (size, transmission flags).
    pub fn go(&mut self, name: &str, structured: bool) -> (u64, u16) {
        if structured {
            self.send_option(OPT_STRUCTURED_REPLY, &[]);
            assert_eq!(self.option_reply().1, REP_ACK);
            self.send_option(
                OPT_SET_META_CONTEXT,
                &Self::meta_data(name, &[BASE_ALLOCATION]),
            );
            let (_, kind, data) = self.option_reply();
            assert_eq!(kind, REP_META_CONTEXT);
            assert_eq!(&data[4..], BASE_ALLOCATION.as_bytes());
            assert_eq!(self.option_reply().1, REP_ACK);
        }
        self.send_option(OPT_GO, &Self::export_data(name));
        let mut export = None;
        loop {
            let (opt, kind, data) = self.option_reply();
            assert_eq!(opt, OPT_GO);
            match kind {
                REP_INFO if u16::from_be_bytes([data[0], data[1]]) == INFO_EXPORT => {
                    let size = u64::from_be_bytes(data[2..10].try_into().expect("8-byte slice"));
                    let flags = u16::from_be_bytes([data[10], data[11]]);
                    export = Some((size, flags));
                }
                REP_INFO => {}
                REP_ACK => return export.expect("INFO_EXPORT before ACK"),
                other => panic!(
                    "GO failed with reply {other:#x}: {:?}",
                    String::from_utf8_lossy(&data)
                ),
            }
        }
    }

    /// Connect, negotiate and GO in one step.
    pub fn open(port: u16, name: &str, structured: bool) -> (Self, u64, u16) {
        let mut c = Self::negotiating(port);
        let (size, flags) = c.go(name, structured);
        (c, size, flags)
    }

    pub fn request(&mut self, kind: u16, flags: u16, handle: u64, offset: u64, len: u32) {
        let r = basalt_nbd::request::Request {
            flags,
            kind,
            handle,
            offset,
            length: len,
        };
        self.send(&r.encode());
    }

    /// Read a simple reply header: (error, handle). Data, if any, is left unread.
    pub fn simple(&mut self) -> (u32, u64) {
        assert_eq!(self.u32(), SIMPLE_REPLY_MAGIC, "expected a simple reply");
        (self.u32(), self.u64())
    }

    /// Read either reply kind; a simple reply comes back as a chunk of kind u16::MAX with the
    /// error code as payload.
    pub fn any_reply(&mut self) -> Chunk {
        match self.u32() {
            SIMPLE_REPLY_MAGIC => {
                let err = self.u32();
                let handle = self.u64();
                Chunk {
                    flags: REPLY_FLAG_DONE,
                    kind: u16::MAX,
                    handle,
                    payload: err.to_be_bytes().to_vec(),
                }
            }
            STRUCTURED_REPLY_MAGIC => {
                let flags = self.u16();
                let kind = self.u16();
                let handle = self.u64();
                let len = self.u32() as usize;
                let payload = self.read_n(len);
                Chunk {
                    flags,
                    kind,
                    handle,
                    payload,
                }
            }
            m => panic!("bad reply magic {m:#x}"),
        }
    }

    /// Assert the server closed the connection (EOF or reset), within the read timeout.
    pub fn expect_closed(&mut self) {
        let mut b = [0u8; 64];
        loop {
            match self.s.read(&mut b) {
                Ok(0) => return,
                Ok(_) => continue, // drain anything sent before the close
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
                Err(e) => panic!("expected the server to close, got {e}"),
            }
        }
    }
}

/// A command for an installed client tool; fails clearly when the tool is missing.
pub fn tool(name: &str) -> Command {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{name}` is not installed: the NBD client tests need libnbd-bin (nbdinfo, nbdcopy), \
         python3-libnbd (nbdsh), qemu-utils (qemu-io, qemu-img) and fio; the project's setup \
         script installs them"
    );
    let mut c = Command::new(name);
    if name == "nbdsh" {
        // nbdsh runs `python3 -m nbd`; the Debian python carries the nbd module, a python
        // earlier on PATH (pyenv, venv) may not.
        let path = std::env::var("PATH").unwrap_or_default();
        c.env("PATH", format!("/usr/bin:{path}"));
    }
    c
}

/// Run a command to completion; panic with its output unless it succeeded.
pub fn run_ok(cmd: &mut Command) -> String {
    let out: Output = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout
}
