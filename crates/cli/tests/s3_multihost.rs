//! S3 on the multi-host cluster: two stateless `basalt s3` gateways in front of 3 hosts ×
//! 2 OSDs serve the same buckets, and keep serving every byte after an OSD is killed;
//! versioned writes and lifecycle workers through both, with a gateway killed -9 mid-way.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use basalt_testcluster::{Proc, ProcessSpec};
use common::{assert_ok, run};
use multihost::{basalt_bin, Layout, MultiHost, DAEMON_START};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const S3_PORTS: [u16; 2] = [9000, 9001];
/// How long after `s3 key rm` a gateway may still accept the key (it caches keys for at
/// most 5 s), with a second of margin.
const KEY_CACHE_BOUND: Duration = Duration::from_secs(6);
/// Lines of the lifecycle worker's debug log around each pass.
const PASS_STARTED: &str = "lifecycle pass started";
const PASS_DONE: &str = "lifecycle pass done";

fn field<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(label))
        .map(str::trim)
        .unwrap_or_else(|| panic!("{label} in:\n{text}"))
}

fn script(mode: &str, endpoints: &[String], access: &str, secret: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3/two_gateways.py");
    let out = run(
        Command::new("python3")
            .arg(path)
            .arg(mode)
            .args(endpoints)
            .env("AWS_ACCESS_KEY_ID", access)
            .env("AWS_SECRET_ACCESS_KEY", secret),
        Duration::from_secs(300),
    );
    assert_ok(&out, &format!("two_gateways.py {mode}"));
}

/// `two_gateways.py MODE` running in the background, its stdin open for a line that ends
/// its writes.
struct Background {
    mode: &'static str,
    child: Child,
    stdout: BufReader<ChildStdout>,
    stderr: std::thread::JoinHandle<String>,
}

impl Background {
    /// Starts the script and waits for its first line, "WRITING".
    fn start(mode: &'static str, endpoints: &[String], access: &str, secret: &str) -> Self {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3/two_gateways.py");
        let mut child = Command::new("python3")
            .arg(path)
            .arg(mode)
            .args(endpoints)
            .env("AWS_ACCESS_KEY_ID", access)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start two_gateways.py {mode}: {e}"));
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut stderr = child.stderr.take().expect("stderr");
        // Drained meanwhile, so a long traceback never blocks the script.
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            stderr.read_to_string(&mut text).ok();
            text
        });
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .expect("read the script's first line");
        let mut script = Background {
            mode,
            child,
            stdout,
            stderr,
        };
        if !line.contains("WRITING") {
            script.child.kill().ok();
            let status = script.child.wait();
            let errors = script.stderr.join().unwrap_or_default();
            panic!("two_gateways.py {mode} did not start writing ({status:?}):\n{line}\n{errors}");
        }
        script
    }

    /// Tells the writers to stop (a line on stdin).
    fn stop_writing(&mut self) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "STOP").expect("tell the script to stop writing");
        stdin.flush().expect("flush the script's stdin");
    }

    /// Waits for the script to end (at most 300 s): it must succeed and print `done`.
    fn finish(mut self, done: &str) -> String {
        let status = common::wait_timeout(&mut self.child, Duration::from_secs(300));
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).ok();
        let errors = self.stderr.join().unwrap_or_default();
        assert!(
            status.is_some_and(|s| s.success()) && rest.contains(done),
            "two_gateways.py {} failed ({status:?}):\n{rest}\n{errors}",
            self.mode
        );
        rest
    }
}

/// How many lifecycle passes `gateway`'s current incarnation started and finished.
fn passes(gateway: &Proc) -> (usize, usize) {
    let log = gateway.current_log();
    (
        log.matches(PASS_STARTED).count(),
        log.matches(PASS_DONE).count(),
    )
}

/// Waits (at most `timeout`) until `gateway` has started (`done`: finished) more lifecycle
/// passes than `before`.
fn wait_for_pass(gateway: &Proc, before: usize, done: bool, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    // Loop bound: `timeout`.
    loop {
        let (started, finished) = passes(gateway);
        if (if done { finished } else { started }) > before {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no lifecycle pass {} within {timeout:?}:\n{}",
            if done { "finished" } else { "started" },
            gateway.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills `gateway` -9 while its lifecycle worker is in the middle of a pass, and restarts
/// it a second later: the kill comes 100 ms after a pass started, and counts once the log
/// shows that pass did not finish (else another pass is tried, at most 5). Returns the
/// attempts it took.
fn kill_during_a_pass(gateway: &Proc) -> u32 {
    for attempt in 1..=5 {
        let (started, _) = passes(gateway);
        wait_for_pass(gateway, started, false, Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(100));
        gateway.kill9().expect("kill -9 the gateway");
        let log = gateway.current_log();
        let last = log.rfind(PASS_STARTED).expect("a pass started");
        let cut = !log[last..].contains(PASS_DONE);
        // Down for a second: requests through it fail meanwhile.
        std::thread::sleep(Duration::from_secs(1));
        gateway.restart().expect("restart the gateway");
        gateway
            .wait_for_line("S3 gateway serving", DAEMON_START)
            .unwrap_or_else(|e| panic!("the gateway did not restart: {e:#}\n{}", gateway.log()));
        if cut {
            return attempt;
        }
    }
    panic!(
        "every lifecycle pass ended within 100 ms: none was cut\n{}",
        gateway.log()
    );
}

/// Two gateways with one access key: objects and a multipart upload written through them
/// read back through both after an OSD is killed -9; versioned writes through both while
/// gateway A is killed -9 and restarted keep every acknowledged version once; lifecycle
/// workers of both (days of 2 s) apply expiration, noncurrent-version expiration, lone
/// delete marker removal and upload aborts while writers race them and A is killed -9 in
/// the middle of a pass, and remove nothing else (two_gateways.py, modes write, verify,
/// versions, lifecycle); a removed key is then refused.
#[test]
fn two_gateways_serve_the_same_buckets_through_an_osd_failure() {
    let mh = MultiHost::start(Layout::default());
    let dir = tempfile::tempdir().expect("temp dir");
    let master = dir.path().join("s3-master.key");
    let master = master.to_str().expect("utf-8 path");
    let created = mh.cli_ok(&[
        "s3",
        "key",
        "create",
        "--user",
        "alice",
        "--master-key",
        master,
    ]);
    let (access, secret) = (
        field(&created, "access key:"),
        field(&created, "secret key:"),
    );
    assert!(
        mh.cli_ok(&["s3", "key", "ls"]).contains(access),
        "the key is listed"
    );
    let mut gateways = Vec::new();
    let mut endpoints = Vec::new();
    for port in S3_PORTS {
        let listen = format!("{}:{port}", mh.client_host.ip);
        let spec = ProcessSpec::new(basalt_bin())
            .name(format!("s3-{port}"))
            .args(["s3", "--meta", &mh.meta_url, "--listen", &listen])
            .env("BASALT_KEYRING", &mh.keyring)
            .args(["--master-key", master])
            // Lifecycle days of 2 s and a pass every second (only the last part has rules),
            // each pass's start and end in the log.
            .args(["--lifecycle-day", "2", "--lifecycle-every", "1"])
            .env(
                "RUST_LOG",
                "info,s3s=off,basalt_s3::gateway::lifecycle=debug",
            );
        let proc = mh
            .net
            .spawn(&mh.client_host, spec)
            .expect("spawn basalt s3");
        proc.wait_for_line("S3 gateway serving", DAEMON_START)
            .unwrap_or_else(|e| panic!("basalt s3 did not start: {e:#}\n{}", proc.log()));
        gateways.push(proc);
        endpoints.push(format!("http://{listen}"));
    }
    script("write", &endpoints, access, secret);
    // Kill an OSD holding the bucket's data: every PG keeps two copies and stays active.
    mh.osds[0].proc.kill9().expect("kill -9 osd.0");
    mh.wait_status("osd.0 marked down", Duration::from_secs(60), |s| {
        s["osds"][0]["up"] == false
    });
    script("verify", &endpoints, access, secret);
    // Versioned writes through both gateways while gateway A is killed -9 and restarted:
    // every acknowledged version stays, once.
    let writers = Background::start("versions", &endpoints, access, secret);
    std::thread::sleep(Duration::from_secs(3));
    gateways[0].kill9().expect("kill -9 gateway A");
    std::thread::sleep(Duration::from_secs(1));
    gateways[0].restart().expect("restart gateway A");
    gateways[0]
        .wait_for_line("S3 gateway serving", DAEMON_START)
        .unwrap_or_else(|e| panic!("gateway A did not restart: {e:#}\n{}", gateways[0].log()));
    writers.finish("VERSIONS");
    // Lifecycle rules applied by both gateways' workers while writers PUT through both and
    // gateway A is killed -9 in the middle of a pass: what expires goes, nothing else does,
    // no current version is lost (two_gateways.py, "lifecycle").
    let mut writers = Background::start("lifecycle", &endpoints, access, secret);
    let attempts = kill_during_a_pass(&gateways[0]);
    // The writers go on until the restarted A has made three whole passes.
    wait_for_pass(&gateways[0], 2, true, Duration::from_secs(60));
    writers.stop_writing();
    let summary = writers.finish("LIFECYCLE");
    eprintln!("gateway A killed in a lifecycle pass (attempt {attempts}); {summary}");
    // A removed key stops working (gateways cache a key for at most 5 s): polled, within
    // that bound and a second of margin.
    mh.cli_ok(&["s3", "key", "rm", access]);
    let removed = Instant::now();
    // Bound: one list per round until the deadline.
    loop {
        let asked_after = removed.elapsed();
        let out = run(
            Command::new("python3")
                .args(["-c", "import boto3,sys; boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1', aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3]).list_buckets()"])
                .args([&endpoints[1], access, secret]),
            Duration::from_secs(60),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            assert!(stderr.contains("InvalidAccessKeyId"), "{stderr}");
            break;
        }
        assert!(
            asked_after < KEY_CACHE_BOUND,
            "a removed key is still accepted {asked_after:?} after its removal"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    drop(gateways);
}

/// One signed request on `c`: its status and body.
async fn send(
    c: &mut basalt_s3client::Connection,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, Vec<u8>) {
    use sha2::Digest;
    let sha = hex::encode(sha2::Sha256::digest(body));
    let status = c
        .send(method, path, "", &[], body, &sha)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    (status, c.body().to_vec())
}

/// The body of `GET /metrics` at `addr`.
fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr)
        .unwrap_or_else(|e| panic!("connect to /metrics at {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// A started `basalt s3` on the client host of `mh` listening on `port`, with the given
/// `--metrics-listen` (none: the default); returns it and its banner line.
fn gateway(mh: &MultiHost, master: &str, port: u16, metrics: Option<&str>) -> (Proc, String) {
    let listen = format!("{}:{port}", mh.client_host.ip);
    let mut spec = ProcessSpec::new(basalt_bin())
        .name(format!("s3-{port}"))
        .args(["s3", "--meta", &mh.meta_url, "--listen", &listen])
        .env("BASALT_KEYRING", &mh.keyring)
        .args(["--master-key", master]);
    if let Some(m) = metrics {
        spec = spec.args(["--metrics-listen", m]);
    }
    let proc = mh
        .net
        .spawn(&mh.client_host, spec)
        .expect("spawn basalt s3");
    let line = proc
        .wait_for_line("S3 gateway serving", DAEMON_START)
        .unwrap_or_else(|e| panic!("basalt s3 did not start: {e:#}\n{}", proc.log()));
    (proc, line)
}

#[test]
fn s3_gateway_serves_metrics_of_its_requests() {
    // Goal: `basalt s3 --metrics-listen IP:PORT` serves /metrics there with the S3 series of
    // the requests it answered (by operation, API class and status), beside the process
    // series every daemon serves; by default it serves them on loopback at its port + 1000;
    // `--metrics-listen off` serves none.
    let mh = MultiHost::start(Layout {
        hosts: 3,
        osds_per_host: 1,
        pgs: 8,
        ..Layout::default()
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let master = dir.path().join("s3-master.key");
    let master = master.to_str().expect("utf-8 path");
    let created = mh.cli_ok(&["s3", "key", "create", "--master-key", master]);
    let (access, secret) = (
        field(&created, "access key:"),
        field(&created, "secret key:"),
    );
    let ip = mh.client_host.ip.to_string();
    let metrics = format!("{ip}:9100");
    let (gw, banner) = gateway(&mh, master, 9000, Some(&metrics));
    assert!(
        banner.contains(&format!("metrics http://{metrics}/metrics")),
        "{banner}"
    );

    // A bucket, one object written and read back, one listing, one refused GET.
    let body = b"what the metrics must count".to_vec();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = basalt_s3client::Connection::new(
            &format!("{ip}:9000"),
            &basalt_s3client::Signer::new(access, secret, "us-east-1"),
        );
        assert_eq!(send(&mut c, "PUT", "/metered", b"").await.0, 200);
        assert_eq!(send(&mut c, "PUT", "/metered/k", &body).await.0, 200);
        assert_eq!(
            send(&mut c, "GET", "/metered/k", b"").await,
            (200, body.clone())
        );
        assert_eq!(send(&mut c, "GET", "/metered", b"").await.0, 200);
        assert_eq!(send(&mut c, "GET", "/metered/absent", b"").await.0, 404);
    });

    let text = scrape(&metrics);
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
    };
    assert_eq!(value("basalt_s3_requests_total{op=\"PutObject\"}"), 1.0);
    assert_eq!(value("basalt_s3_requests_total{op=\"GetObject\"}"), 1.0);
    assert_eq!(value("basalt_s3_requests_total{op=\"List\"}"), 1.0);
    assert_eq!(value("basalt_s3_get_object_bytes_total"), body.len() as f64);
    assert_eq!(
        value("basalt_s3_responses_total{class=\"object_write\",code=\"2xx\"}"),
        1.0
    );
    assert_eq!(
        value("basalt_s3_responses_total{class=\"object_read\",code=\"2xx\"}"),
        1.0
    );
    assert_eq!(
        value("basalt_s3_responses_total{class=\"object_read\",code=\"4xx\"}"),
        1.0
    );
    assert_eq!(
        value("basalt_s3_request_seconds_count{class=\"object_read\"}"),
        2.0
    );
    // Present and sane; it counts whole clock ticks (10 ms), so a gateway that has used
    // less CPU than one tick reads 0 (seen: a run on 2026-11-30 failed a "> 0" check).
    assert!(value("process_cpu_seconds_total") >= 0.0);
    assert!(value("process_resident_memory_bytes") > 0.0);
    drop(gw);

    // The default: loopback, the S3 port + 1000 (reachable from the gateway's own host).
    let (gw, banner) = gateway(&mh, master, 9001, None);
    assert!(
        banner.contains("metrics http://127.0.0.1:10001/metrics"),
        "{banner}"
    );
    let listening = listeners(&mh);
    assert!(
        listening.contains(&"127.0.0.1:10001".to_string()),
        "{listening:?}"
    );
    drop(gw);

    // Off: no endpoint, none announced, nothing listening but S3.
    let (gw, banner) = gateway(&mh, master, 9002, Some("off"));
    assert!(!banner.contains("metrics"), "{banner}");
    let listening = listeners(&mh);
    assert!(listening.contains(&format!("{ip}:9002")), "{listening:?}");
    assert!(
        !listening.iter().any(|a| a.ends_with(":10002")),
        "{listening:?}"
    );
    drop(gw);
}

/// The local addresses of the TCP listeners on the client host of `mh` (`ss -ltn`).
fn listeners(mh: &MultiHost) -> Vec<String> {
    let out = mh
        .net
        .run(
            &mh.client_host,
            ProcessSpec::new("ss").args(["-ltnH"]),
            Duration::from_secs(30),
        )
        .expect("ss -ltn on the client host");
    assert_ok(&out, "ss -ltn");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3).map(String::from))
        .collect()
}
