//! Tests of [`EtcdMeta`] against a real etcd (`/usr/bin/etcd`, Debian `etcd-server`) that
//! each test starts on free local ports in a temporary directory.

use crate::conformance;
use crate::etcd::{EtcdConfig, EtcdMeta};
use crate::store::{MetaError, MetaStore};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const ETCD_BIN: &str = "/usr/bin/etcd";
/// Longest wait for a started etcd to answer.
const READY_WAIT_MS: u64 = 15_000;
/// Request timeout of the clients in these tests: short, so failures show quickly.
const REQUEST_TIMEOUT_MS: u64 = 1_000;

/// One etcd process on 127.0.0.1, killed on drop.
struct EtcdServer {
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local address").port()
}

impl EtcdServer {
    /// Start a fresh single-member etcd and wait until it answers.
    async fn start() -> Self {
        assert!(
            std::path::Path::new(ETCD_BIN).exists(),
            "{ETCD_BIN} is missing: run scripts/install-test-deps.sh (installs Debian etcd-server)"
        );
        let mut server = Self {
            dir: tempfile::tempdir().expect("create etcd temp dir"),
            client_port: free_port(),
            peer_port: free_port(),
            child: None,
        };
        server.spawn().await;
        server
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Start the process (on the existing data dir if any) and wait until it answers.
    async fn spawn(&mut self) {
        assert!(self.child.is_none(), "etcd already running");
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .expect("open etcd log");
        let child = Command::new(ETCD_BIN)
            .arg("--name=basalt-test")
            .arg(format!("--data-dir={}", self.data_dir().display()))
            .arg(format!("--listen-client-urls={}", self.endpoint()))
            .arg(format!("--advertise-client-urls={}", self.endpoint()))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=basalt-test={peer}"))
            .arg("--initial-cluster-state=new")
            .arg("--logger=zap")
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn /usr/bin/etcd");
        self.child = Some(child);
        self.wait_ready().await;
    }

    /// Poll until a client can read, at most READY_WAIT_MS.
    async fn wait_ready(&mut self) {
        let start = Instant::now();
        // Loop bound: READY_WAIT_MS of connection attempts.
        'ready: loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("etcd exited with {status}: {}", self.log_tail());
            }
            let mut config = EtcdConfig::new(vec![self.endpoint()]);
            config.connect_timeout_ms = 200;
            config.request_timeout_ms = 500;
            if EtcdMeta::connect(config).await.is_ok() {
                break 'ready;
            }
            assert!(
                start.elapsed() < Duration::from_millis(READY_WAIT_MS),
                "etcd did not answer within {READY_WAIT_MS} ms: {}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default();
        let start = log.len().saturating_sub(2000);
        log.get(start..).unwrap_or_default().to_string()
    }

    /// Kill the process (as a crash would) and reap it.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Send `signal` (e.g. "STOP", "CONT") to the running process.
    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("etcd running").id();
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid} failed: {status}");
    }

    /// A client whose keys live under `namespace`.
    async fn client(&self, namespace: &str) -> EtcdMeta {
        let mut config = EtcdConfig::new(vec![self.endpoint()]).with_namespace(namespace);
        config.connect_timeout_ms = 500;
        config.request_timeout_ms = REQUEST_TIMEOUT_MS;
        EtcdMeta::connect(config)
            .await
            .expect("connect to test etcd")
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Goal: EtcdMeta passes the shared conformance suite against a real etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_real_etcd() {
    let server = EtcdServer::start().await;
    let meta = server.client("/basalt-test/conformance").await;
    conformance::run_all(&meta).await;
}

/// Goal: two tasks racing compare-and-swap on one etcd key: exactly one wins per round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cas_race_real_etcd() {
    let server = EtcdServer::start().await;
    let meta = server.client("/basalt-test/race").await;
    conformance::cas_race(Arc::new(meta)).await;
}

/// Goal: two namespaces on one etcd never see each other's keys or events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_are_isolated() {
    let server = EtcdServer::start().await;
    let a = server.client("/cluster-a").await;
    let b = server.client("/cluster-b").await;
    let mut watch_b = b.watch_prefix("/", 0).await.unwrap();
    a.put("/volumes/v1", b"a".to_vec()).await.unwrap();
    assert!(b.get("/volumes/v1").await.unwrap().is_none());
    assert!(b.list("/").await.unwrap().is_empty());
    let keys: Vec<String> = a
        .list("/")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(
        keys,
        vec!["/volumes/v1"],
        "keys come back without the namespace"
    );
    let rb = b.put("/volumes/v1", b"b".to_vec()).await.unwrap();
    let ev = conformance::next_event(&mut watch_b).await;
    assert_eq!(
        (ev.key(), ev.revision()),
        ("/volumes/v1", rb),
        "only b's own change"
    );
}

/// Goal: connecting to an endpoint where nothing listens fails with Unavailable in bounded
/// time instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_nothing_is_unavailable() {
    let mut config = EtcdConfig::new(vec![format!("http://127.0.0.1:{}", free_port())]);
    config.connect_timeout_ms = 300;
    config.request_timeout_ms = 1_000;
    let start = Instant::now();
    let result = EtcdMeta::connect(config).await;
    assert!(
        matches!(result, Err(MetaError::Unavailable { .. })),
        "expected Unavailable"
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "took {:?}",
        start.elapsed()
    );
}

/// Goal: while etcd is down, reads, writes and watches fail with Unavailable within a
/// bound; once it restarts on the same data dir, the same client works again and the data
/// and revisions are intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_etcd_restart() {
    /// Longest time a request may take to fail while etcd is down.
    const FAIL_WITHIN_MS: u64 = REQUEST_TIMEOUT_MS + 2_000;
    /// Longest time the client may take to work again after etcd is back.
    const RECOVER_WITHIN_MS: u64 = 15_000;

    let mut server = EtcdServer::start().await;
    let meta = server.client("/basalt-test/restart").await;
    let rev = meta.put("/vol/a", b"before".to_vec()).await.unwrap();
    let mut watch = meta.watch_prefix("/vol/", 0).await.unwrap();

    server.stop();
    let start = Instant::now();
    let get = meta.get("/vol/a").await;
    assert!(
        matches!(get, Err(MetaError::Unavailable { .. })),
        "get while etcd is down: {get:?}"
    );
    if let Err(e) = &get {
        eprintln!("while down: {e}");
    }
    let put = meta.put("/vol/b", b"lost".to_vec()).await;
    assert!(
        matches!(put, Err(MetaError::Unavailable { .. })),
        "put while etcd is down: {put:?}"
    );
    eprintln!(
        "get and put failed after {:?} with etcd down",
        start.elapsed()
    );
    assert!(
        start.elapsed() < Duration::from_millis(2 * FAIL_WITHIN_MS),
        "failing took {:?}",
        start.elapsed()
    );
    let ended = tokio::time::timeout(Duration::from_millis(FAIL_WITHIN_MS), watch.recv()).await;
    match ended {
        Ok(Some(Err(MetaError::Unavailable { .. }))) | Ok(None) => {}
        other => panic!("watch while etcd is down: {other:?}"),
    }

    server.spawn().await;
    let start = Instant::now();
    // Loop bound: RECOVER_WITHIN_MS of attempts on the same client.
    let (value, got_rev) = 'recover: loop {
        match meta.get("/vol/a").await {
            Ok(found) => break 'recover found.expect("data survives the restart"),
            Err(e) => assert!(
                start.elapsed() < Duration::from_millis(RECOVER_WITHIN_MS),
                "client did not recover within {RECOVER_WITHIN_MS} ms: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "client recovered {:?} after etcd answered again",
        start.elapsed()
    );
    assert_eq!((value.as_slice(), got_rev), (&b"before"[..], rev));
    let rev2 = meta.put("/vol/a", b"after".to_vec()).await.unwrap();
    assert!(rev2 > rev);
    // A new watch from the old revision sees the change made after the restart.
    let mut watch = meta.watch_prefix("/vol/", rev + 1).await.unwrap();
    assert_eq!(conformance::next_event(&mut watch).await.revision(), rev2);
}

/// Goal: a frozen etcd (SIGSTOP: the connection stays open but nothing answers) makes
/// requests fail with Unavailable after the request timeout instead of hanging; after
/// SIGCONT the same client works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_etcd_times_out() {
    /// Longest time a request may take to fail while etcd is frozen.
    const FAIL_WITHIN_MS: u64 = REQUEST_TIMEOUT_MS + 1_000;

    let server = EtcdServer::start().await;
    let meta = server.client("/basalt-test/frozen").await;
    let rev = meta.put("/vol/a", b"v".to_vec()).await.unwrap();

    server.signal("STOP");
    let start = Instant::now();
    let get = meta.get("/vol/a").await;
    let took = start.elapsed();
    server.signal("CONT");
    assert!(
        matches!(get, Err(MetaError::Unavailable { .. })),
        "get while etcd is frozen: {get:?}"
    );
    assert!(
        took < Duration::from_millis(FAIL_WITHIN_MS),
        "failing took {took:?}"
    );
    eprintln!("get failed after {took:?} with etcd frozen: {get:?}");

    let start = Instant::now();
    // Loop bound: READY_WAIT_MS of attempts on the same client.
    let got_rev = 'recover: loop {
        match meta.get("/vol/a").await {
            Ok(found) => break 'recover found.expect("key still there").1,
            Err(e) => assert!(
                start.elapsed() < Duration::from_millis(READY_WAIT_MS),
                "client did not recover within {READY_WAIT_MS} ms: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(got_rev, rev);
}

/// Run `program args` in `dir`, failing the test with its output if it fails.
fn run_in(dir: &std::path::Path, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Goal: an etcd with TLS and its own user authentication is reached through `etcds://`
/// with `--meta-ca` and a user whose password is in a file; a missing CA, a missing or
/// wrong password, or a plain `etcd://` URL are refused with errors that say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secured_etcd_needs_the_ca_and_the_password() {
    use crate::url::{connect_meta_with, MetaAccess};
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    // A CA and a server certificate for 127.0.0.1, made with the openssl tool.
    run_in(
        d,
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "1",
            "-subj",
            "/CN=basalt-test-ca",
        ],
    );
    run_in(
        d,
        "openssl",
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(d.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").expect("write ext");
    run_in(
        d,
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "1",
            "-extfile",
            "ext.cnf",
        ],
    );
    let (port, peer_port) = (free_port(), free_port());
    let endpoint = format!("https://127.0.0.1:{port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    let log = std::fs::File::create(d.join("etcd.log")).expect("log");
    let mut child = Command::new(ETCD_BIN)
        .arg("--name=secured")
        .arg(format!("--data-dir={}", d.join("data").display()))
        .arg(format!("--listen-client-urls={endpoint}"))
        .arg(format!("--advertise-client-urls={endpoint}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster=secured={peer}"))
        .arg(format!("--cert-file={}", d.join("server.pem").display()))
        .arg(format!("--key-file={}", d.join("server.key").display()))
        .arg("--log-level=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn etcd");
    let url = format!("etcds://127.0.0.1:{port}/secured");
    let tls_only = MetaAccess {
        ca: Some(d.join("ca.pem")),
        ..MetaAccess::default()
    };
    // Bound: READY_WAIT_MS of attempts until it answers over TLS.
    let start = Instant::now();
    while connect_meta_with(&url, &tls_only).await.is_err() {
        assert!(
            start.elapsed() < Duration::from_millis(READY_WAIT_MS),
            "etcd over TLS did not answer: {}",
            std::fs::read_to_string(d.join("etcd.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ca = d.join("ca.pem").display().to_string();
    let ctl = |args: &[&str]| {
        let mut all = vec!["--endpoints", endpoint.as_str(), "--cacert", ca.as_str()];
        all.extend_from_slice(args);
        run_in(d, "etcdctl", &all);
    };
    ctl(&["user", "add", "root", "--new-user-password=s3cret"]);
    ctl(&["auth", "enable"]);
    std::fs::write(d.join("pw"), "s3cret\n").expect("write password");
    std::fs::write(d.join("bad-pw"), "guess\n").expect("write password");

    let good = MetaAccess {
        user: Some("root".into()),
        password_file: Some(d.join("pw")),
        ..tls_only.clone()
    };
    let meta = connect_meta_with(&url, &good)
        .await
        .expect("connect with CA and user");
    meta.put("/k", b"v".to_vec()).await.expect("put");
    assert_eq!(meta.get("/k").await.expect("get").expect("present").0, b"v");

    let err = |r: Result<Arc<dyn MetaStore>, MetaError>| match r {
        Ok(_) => panic!("connected"),
        Err(e) => e.to_string(),
    };
    let e = err(connect_meta_with(&url, &tls_only).await);
    assert!(e.contains("etcd at"), "no user: {e}");
    let wrong = MetaAccess {
        password_file: Some(d.join("bad-pw")),
        ..good.clone()
    };
    let e = err(connect_meta_with(&url, &wrong).await);
    assert!(e.to_lowercase().contains("auth"), "wrong password: {e}");
    let no_ca = MetaAccess {
        ca: None,
        ..good.clone()
    };
    let e = err(connect_meta_with(&url, &no_ca).await);
    assert!(e.contains("needs --meta-ca"), "{e}");
    let plain = format!("etcd://127.0.0.1:{port}/secured");
    let e = err(connect_meta_with(&plain, &good).await);
    assert!(e.contains("use etcds://"), "{e}");
    let no_pw = MetaAccess {
        password_file: None,
        ..good.clone()
    };
    let e = err(connect_meta_with(&url, &no_pw).await);
    assert!(e.contains("--meta-password-file"), "{e}");
    let _ = child.kill();
    let _ = child.wait();
}
