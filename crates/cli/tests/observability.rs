//! Observability end to end: the alert rules in contrib/ pass promtool's check and unit
//! tests, and a real Prometheus server scraping a `basalt up` during an fio run counts
//! exactly fio's writes and sees plausible latency quantiles, every dashboard query is
//! valid, and the OSD-down alert fires once the process is killed.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use common::*;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Seconds fio runs; latency quantiles are taken over a window inside the run.
const FIO_RUNTIME_SECS: u64 = 14;
/// The rate window, ending `RATE_END_BEFORE_FIO_END_SECS` before fio's end.
const RATE_WINDOW_SECS: u64 = 8;
const RATE_END_BEFORE_FIO_END_SECS: u64 = 2;
/// Longest wait for Prometheus to be ready, and for an alert to fire.
const PROMETHEUS_READY_TIMEOUT: Duration = Duration::from_secs(60);
const ALERT_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest wait for every target's scrape past a given time to land (1 s scrape interval).
const SCRAPED_TIMEOUT: Duration = Duration::from_secs(30);

/// Held by the tests that run fio under Prometheus: two of them at once on a small machine
/// push each one's latency quantiles toward their bounds.
static FIO_RATE_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Run alone among the fio rate tests (a failed one poisons the lock: the others still run).
fn fio_rate_test() -> std::sync::MutexGuard<'static, ()> {
    FIO_RATE_TESTS.lock().unwrap_or_else(|e| e.into_inner())
}

fn contrib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib")
}

/// `GET path` on `addr` (one request per connection); (status code, body).
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    // Prometheus answers small JSON documents without chunking only sometimes: undo it.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, body)
}

/// The payload of a chunked HTTP body.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    // Loop bound: every pass consumes a chunk of the finite body.
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Percent-encode a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server of the test, killed on drop.
struct Prometheus {
    child: Child,
    addr: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Start Prometheus scraping `target` (job `basalt-up`) every second, with the alert
    /// rules of contrib/, its files under `dir`.
    fn start(dir: &Path, target: &str) -> Prometheus {
        let rules = contrib().join("prometheus-alerts.yml");
        Prometheus::start_jobs(dir, &rules, &[("basalt-up", vec![target.to_string()])])
    }

    /// Start Prometheus scraping every second each job's targets (job name, `IP:PORT`s),
    /// evaluating the alert rules in `rules`, its files under `dir`.
    fn start_jobs(dir: &Path, rules: &Path, jobs: &[(&str, Vec<String>)]) -> Prometheus {
        let prometheus = require_tool("prometheus", "prometheus");
        let config = dir.join("prometheus.yml");
        let mut scrape = String::new();
        for (job, targets) in jobs {
            let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
            scrape.push_str(&format!(
                "  - job_name: {job}\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            ));
        }
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {}\n\
                 scrape_configs:\n{scrape}",
                rules.display()
            ),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let p = Prometheus { child, addr };
        let deadline = Instant::now() + PROMETHEUS_READY_TIMEOUT;
        // Loop bound: PROMETHEUS_READY_TIMEOUT.
        loop {
            let ready = std::net::TcpStream::connect(&p.addr).is_ok()
                && http_get(&p.addr, "/-/ready").0 == 200;
            if ready {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready in {PROMETHEUS_READY_TIMEOUT:?}:\n{}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The API's answer to `path`, checked to be a success.
    fn api(&self, path: &str) -> serde_json::Value {
        let (status, body) = http_get(&self.addr, path);
        assert_eq!(status, 200, "{path}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{path}: {body}");
        v
    }

    /// The instant vector of `query` at `at` (unix seconds).
    fn query(&self, query: &str, at: f64) -> Vec<serde_json::Value> {
        let v = self.api(&format!(
            "/api/v1/query?query={}&time={at:.3}",
            encode(query)
        ));
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Wait (bounded) until every target has a sample scraped at or after `at`: a target's
    /// samples land in order, so then all of them up to `at` are queryable.
    fn wait_scraped_past(&self, at: f64) {
        let deadline = Instant::now() + SCRAPED_TIMEOUT;
        // Loop bound: SCRAPED_TIMEOUT.
        loop {
            let oldest_latest = self
                .query("min(timestamp(up))", now_secs())
                .first()
                .and_then(|r| r["value"][1].as_str()?.parse::<f64>().ok());
            if oldest_latest.is_some_and(|t| t >= at) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no scrape of every target at or after {at} within {SCRAPED_TIMEOUT:?} \
                 (oldest latest sample {oldest_latest:?})"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The sum of the series `selector` selects at `at` (0 when none exists yet).
    fn total(&self, selector: &str, at: f64) -> f64 {
        self.value(&format!("sum({selector}) or vector(0)"), at)
    }

    /// A time from which every target's latest sample is at or after the call (counter
    /// values queried there include everything counted before the call).
    fn settled(&self) -> f64 {
        self.wait_scraped_past(now_secs());
        now_secs()
    }

    /// The single value of `query` at `at`.
    fn value(&self, query: &str, at: f64) -> f64 {
        let r = self.query(query, at);
        assert_eq!(r.len(), 1, "{query}: one series expected, got {r:?}");
        r[0]["value"][1].as_str().unwrap().parse().unwrap()
    }
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The `/metrics` address from `basalt up`'s ready file.
fn metrics_addr(cluster: &Cluster) -> String {
    cluster
        .metrics_addr
        .expect("the ready file names the metrics endpoint")
        .to_string()
}

/// fio's write count, bytes written and mean IOPS, from its JSON report.
fn fio_writes(json: &serde_json::Value) -> (f64, f64, f64) {
    let write = &json["jobs"][0]["write"];
    let count = write["total_ios"].as_f64().unwrap();
    let iops = write["iops"].as_f64().unwrap();
    assert!(count > 0.0 && iops > 0.0, "{json}");
    (count, write["io_bytes"].as_f64().unwrap(), iops)
}

fn assert_within(got: f64, want: f64, tolerance: f64, what: &str) {
    assert!(
        (got - want).abs() <= want * tolerance,
        "{what}: Prometheus says {got:.1}, fio {want:.1} (more than {:.0}% apart)",
        tolerance * 100.0
    );
}

/// Goal: the alert rules in contrib/ are valid and their unit tests pass, and the example
/// Prometheus configuration there is valid.
#[test]
fn alert_rules_pass_promtool() {
    let promtool = require_tool("promtool", "prometheus");
    let check = run(
        Command::new(&promtool)
            .args(["check", "rules", "prometheus-alerts.yml"])
            .current_dir(contrib()),
        Duration::from_secs(60),
    );
    assert_ok(&check, "promtool check rules");
    assert!(text(&check).contains("SUCCESS"), "{}", text(&check));
    let test = run(
        Command::new(&promtool)
            .args(["test", "rules", "prometheus-alerts.test.yml"])
            .current_dir(contrib()),
        Duration::from_secs(60),
    );
    assert_ok(&test, "promtool test rules");
    // The example configuration the README points operators to loads those rules.
    let config = run(
        Command::new(&promtool)
            .args(["check", "config", "prometheus.yml"])
            .current_dir(contrib()),
        Duration::from_secs(60),
    );
    assert_ok(&config, "promtool check config");
    assert!(text(&config).contains("SUCCESS"), "{}", text(&config));
}

/// Goal: a real Prometheus scraping `basalt up` during fio counts exactly the writes
/// and bytes fio reports, in the frontend totals, per volume and at the OSD primaries;
/// latency quantiles that are non-zero and plausible; every dashboard query valid; and,
/// once the process is killed, the OSD-down alert firing.
#[test]
fn prometheus_scrapes_basalt_up_during_fio() {
    let _alone = fio_rate_test();
    let fio = require_tool("fio", "fio");
    let mut cluster = Cluster::start_with(&[
        "--metrics-listen",
        "127.0.0.1:0",
        "--metrics-per-volume",
        "4",
    ]);
    let target = metrics_addr(&cluster);
    // Only GET /metrics is served.
    let (status, _) = http_get(&target, "/");
    assert_eq!(status, 404);
    let prom_dir = cluster.scratch().join("prometheus");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let prom = Prometheus::start(&prom_dir, &target);

    let json_path = cluster.scratch().join("fio.json");
    // Counters before fio starts and once every target is scraped after it ends: their
    // differences are fio's requests, exactly (nothing else writes meanwhile).
    let before = prom.settled();
    let start = now_secs();
    let out = run(
        Command::new(&fio)
            .args([
                "--name=load",
                "--ioengine=nbd",
                &format!("--uri={}", cluster.uri("vol0")),
                "--rw=randwrite",
                "--bs=4k",
                "--size=256m",
                "--iodepth=16",
                "--time_based",
                &format!("--runtime={FIO_RUNTIME_SECS}"),
                "--output-format=json",
            ])
            .arg(format!("--output={}", json_path.display()))
            .current_dir(cluster.scratch()),
        Duration::from_secs(FIO_RUNTIME_SECS + 120),
    );
    let end = now_secs();
    assert_ok(&out, "fio");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let (fio_writes, fio_bytes, fio_iops) = fio_writes(&json);
    assert!(end - start >= FIO_RUNTIME_SECS as f64);

    let after = prom.settled();
    let delta = |selector: &str| prom.total(selector, after) - prom.total(selector, before);
    let nbd = "{frontend=\"nbd\",op=\"write\"}";
    let counted = [
        (
            "NBD writes",
            format!("basalt_frontend_requests_total{nbd}"),
            fio_writes,
        ),
        (
            "NBD bytes written",
            format!("basalt_frontend_bytes_total{nbd}"),
            fio_bytes,
        ),
        (
            "vol0 writes",
            "basalt_volume_requests_total{volume=\"vol0\",op=\"write\"}".into(),
            fio_writes,
        ),
        // Every NBD write is one object write at its primary (4 KiB never spans two objects).
        (
            "OSD primary writes",
            "basalt_osd_writes_total".into(),
            fio_writes,
        ),
        (
            "per-pool writes",
            "basalt_osd_pool_writes_total".into(),
            fio_writes,
        ),
    ];
    for (what, selector, want) in counted {
        assert_eq!(
            delta(&selector),
            want,
            "{what} during fio's run: Prometheus vs fio"
        );
    }

    // Quantiles over a window inside the run.
    let at = end - RATE_END_BEFORE_FIO_END_SECS as f64;
    let w = RATE_WINDOW_SECS;

    // Latency: quantiles non-zero, ordered, and under a second on loopback.
    let quantile = |q: f64, series: &str, selector: &str| {
        prom.value(
            &format!(
                "histogram_quantile({q}, sum by (le) (rate({series}_bucket{selector}[{w}s])))"
            ),
            at,
        )
    };
    let write = "{frontend=\"nbd\",op=\"write\"}";
    let p50 = quantile(0.5, "basalt_frontend_request_seconds", write);
    let p99 = quantile(0.99, "basalt_frontend_request_seconds", write);
    assert!(
        p50 > 0.0 && p50 <= p99 && p99 < 1.0,
        "write p50 {p50} p99 {p99}"
    );
    // At queue depth 16, Little's law bounds the mean latency from fio's rate.
    let mean = delta("basalt_frontend_request_seconds_sum{op=\"write\"}")
        / delta("basalt_frontend_request_seconds_count{op=\"write\"}");
    assert!(
        mean > 0.0 && mean <= 16.0 / fio_iops * 1.2,
        "mean {mean} at {fio_iops} IOPS"
    );
    for stage in [
        "basalt_osd_store_write_seconds",
        "basalt_osd_replication_seconds",
        "basalt_osd_queue_wait_seconds",
    ] {
        let p99 = quantile(0.99, stage, "");
        assert!(p99 > 0.0 && p99 < 1.0, "{stage} p99 {p99}");
    }
    let active = prom.value("sum(basalt_osd_pgs{phase=\"active\"})", at);
    assert_eq!(active, 32.0, "every PG of the pool has an active primary");

    // Every dashboard query is valid PromQL over these series.
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(contrib().join("grafana-basalt.json")).unwrap(),
    )
    .unwrap();
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "10s");
            prom.query(&expr, at);
            queries += 1;
        }
    }
    assert!(queries >= 20, "{queries} dashboard queries");

    // The rules are loaded; killing the process fires BasaltOsdDown (after its 30 s `for`).
    let rules = prom.api("/api/v1/rules");
    let loaded: usize = rules["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["rules"].as_array().map_or(0, Vec::len))
        .sum();
    let in_file = std::fs::read_to_string(contrib().join("prometheus-alerts.yml")).unwrap();
    assert_eq!(loaded, in_file.matches("- alert:").count(), "{rules}");
    cluster.kill9();
    let killed = Instant::now();
    // Loop bound: ALERT_TIMEOUT.
    loop {
        let alerts = prom.api("/api/v1/alerts");
        let firing = alerts["data"]["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["labels"]["alertname"] == "BasaltOsdDown" && a["state"] == "firing");
        if firing {
            break;
        }
        assert!(
            killed.elapsed() < ALERT_TIMEOUT,
            "BasaltOsdDown not firing {ALERT_TIMEOUT:?} after the kill: {alerts}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(
        killed.elapsed() >= Duration::from_secs(30),
        "the alert waits for its `for` period"
    );
}

/// Goal: `basalt volume iostat` reports a known workload: fio writing vol0 at a fixed 100
/// IOPS of 4 KiB (a rate a loaded CI machine sustains) shows as about 100 WR/s with the
/// matching MiB/s, no reads, a write latency. On `basalt up` with its defaults it works
/// through the control socket alone (no `--endpoint`, no `--metrics-per-volume`), as
/// `rbd perf image iostat` does; `--endpoint` reads the same series from `/metrics`, and a
/// bad endpoint is a precise error.
#[test]
fn volume_iostat_reports_a_known_workload() {
    const IOPS: f64 = 100.0;
    let fio = require_tool("fio", "fio");
    let cluster = Cluster::start();
    let target = metrics_addr(&cluster);
    let mut load = Command::new(&fio)
        .args([
            "--name=steady",
            "--ioengine=nbd",
            &format!("--uri={}", cluster.uri("vol0")),
            "--rw=randwrite",
            "--bs=4k",
            "--size=64m",
            "--iodepth=4",
            &format!("--rate_iops={IOPS}"),
            "--time_based",
            "--runtime=16",
        ])
        .current_dir(cluster.scratch())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Let fio connect and settle on its rate.
    std::thread::sleep(Duration::from_secs(4));
    // Through the control socket (`cluster.volume` passes --control).
    let out = cluster.volume(&["iostat", "--interval", "3", "--count", "2"]);
    // The same series through `/metrics`, while fio still runs (16 s: 4 + 6 + 2).
    let scraped = cluster.volume(&[
        "iostat",
        "--endpoint",
        &target,
        "--interval",
        "2",
        "--count",
        "1",
    ]);
    let _ = wait_timeout(&mut load, Duration::from_secs(60));
    assert_ok(&scraped, "basalt volume iostat --endpoint");
    let scraped = text(&scraped);
    let row: Vec<&str> = scraped
        .lines()
        .find(|l| l.starts_with("vol0 "))
        .unwrap_or_else(|| panic!("a vol0 line from /metrics:\n{scraped}"))
        .split_whitespace()
        .collect();
    assert!(
        row[1].parse::<f64>().unwrap() > 0.0,
        "writes seen through /metrics:\n{scraped}"
    );
    assert_ok(&out, "basalt volume iostat");
    let report = text(&out);
    let rows: Vec<Vec<&str>> = report
        .lines()
        .filter(|l| l.starts_with("vol0 "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "one vol0 line per report:\n{report}");
    // fio's rate limiter catches up in bursts: each report is near the rate, their mean
    // close to it.
    let mut sum = 0.0;
    for row in &rows {
        let num = |i: usize| -> f64 { row[i].parse().unwrap() };
        sum += num(1);
        assert_within(num(1), IOPS, 0.5, "iostat WR/s");
        assert_eq!(num(2), 0.0, "no reads:\n{report}");
        // Every write is 4 KiB: MiB/s is WR/s / 256 (to the table's rounding).
        let mib = num(1) * 4096.0 / (1 << 20) as f64;
        assert!((num(3) - mib).abs() <= 0.01, "WR MiB/s vs WR/s:\n{report}");
        assert!(num(5) > 0.0, "a write latency:\n{report}");
        assert_eq!(row[6], "-", "no read latency:\n{report}");
    }
    assert_within(sum / rows.len() as f64, IOPS, 0.2, "mean iostat WR/s");
    // A bad endpoint is a precise error, not a panic.
    let bad = cluster.volume(&["iostat", "--endpoint", "nowhere", "--count", "1"]);
    assert!(!bad.status.success());
    assert!(text(&bad).contains("expected IP:PORT"), "{}", text(&bad));
}

/// Goal: `basalt status --watch` prints the cluster's summary at once (every PG
/// active+clean), then reports it when the cluster goes away instead of exiting.
#[test]
fn status_watch_summarises_then_reports_changes() {
    let mut cluster = Cluster::start();
    let mut watch = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["status", "--watch", "--interval", "0.5", "--control"])
        .arg(&cluster.control)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let wait_for = |needle: &str, seen: &mut Vec<String>| {
        let deadline = Instant::now() + Duration::from_secs(30);
        // Loop bound: 30 s.
        while !seen.iter().any(|l: &String| l.contains(needle)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(_) => panic!("no line with {needle:?} in 30 s:\n{}", seen.join("\n")),
            }
        }
    };
    wait_for("32 PGs (32 active+clean)", &mut seen);
    assert!(seen[0].contains("3 OSDs (3 up)"), "{}", seen[0]);
    cluster.kill9();
    wait_for("status unavailable", &mut seen);
    let _ = watch.kill();
    let _ = watch.wait();
}

/// Seconds an OSD's liveness lease lasts in the harness (`basalt osd --lease-ttl 3`).
const MULTIHOST_LEASE_TTL_SECS: f64 = 3.0;
/// Prometheus's scrape and rule evaluation interval in these tests.
const SCRAPE_INTERVAL_SECS: f64 = 1.0;
/// Allowance on top of lease + scrape for seeing an OSD down: the monitor's tick, the
/// gateway's map watch and the query itself, on a shared 2-core machine.
const DOWN_SLACK_SECS: f64 = 3.0;
/// The `for` of BasaltOsdDown in the test copy of the rules (the shipped rule has 30 s).
const TEST_OSD_DOWN_FOR_SECS: u64 = 5;

/// Goal: a real Prometheus scraping the OSDs and the NBD gateway of a 3-host namespace
/// cluster (each endpoint on its host's address) during fio counts exactly fio's writes
/// and bytes at the gateway, every write at a primary and one store write per write on
/// each host (3 replicas), plausible latency quantiles at the gateway and the OSDs; after
/// a kill -9 of one OSD, its target `up == 0` and the gateway's `basalt_client_osds_up` dropping to 2
/// within the lease time plus a scrape interval (and slack), and BasaltOsdDown going
/// pending then firing after its `for`.
#[test]
fn prometheus_sees_a_three_host_cluster_and_a_killed_osd() {
    use multihost::{Fio, Layout, MultiHost};
    let _alone = fio_rate_test();
    let mh = MultiHost::start(Layout {
        hosts: 3,
        osds_per_host: 1,
        ..Layout::default()
    });
    mh.cli_ok(&["volume", "create", "vol0", "--size", "256M"]);
    let osd_targets: Vec<String> = mh
        .osds
        .iter()
        .map(|o| format!("{}:{}", mh.hosts[o.host].ip, o.port + 1000))
        .collect();
    let gateway_target = format!(
        "{}:{}",
        mh.client_host.ip,
        basalt_testcluster::basalt::NBD_PORT + 1000
    );
    // The shipped rules, with BasaltOsdDown's 30 s `for` shortened to keep the test short.
    let shipped = std::fs::read_to_string(contrib().join("prometheus-alerts.yml")).unwrap();
    let (head, tail) = shipped.split_once("alert: BasaltOsdDown").unwrap();
    let tail = tail.replacen("for: 30s", &format!("for: {TEST_OSD_DOWN_FOR_SECS}s"), 1);
    let prom_dir = mh.net.dir().join("prometheus");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let rules = prom_dir.join("alerts.yml");
    std::fs::write(&rules, format!("{head}alert: BasaltOsdDown{tail}")).unwrap();
    let prom = Prometheus::start_jobs(
        &prom_dir,
        &rules,
        &[
            ("basalt-osd", osd_targets.clone()),
            ("basalt-gateway", vec![gateway_target.clone()]),
        ],
    );

    let fio = Fio::new(
        &mh.uri("vol0"),
        &prom_dir,
        "load",
        &[
            "--rw=randwrite",
            "--bs=4k",
            "--size=256m",
            "--iodepth=16",
            "--time_based",
            &format!("--runtime={FIO_RUNTIME_SECS}"),
        ],
    );
    // Counters before fio starts and once every target is scraped after it ends: their
    // differences are fio's requests, exactly (nothing else writes meanwhile).
    let before = prom.settled();
    let start = now_secs();
    let json = fio.run_ok(Duration::from_secs(FIO_RUNTIME_SECS + 120));
    let end = now_secs();
    let (fio_writes, fio_bytes, fio_iops) = fio_writes(&json);
    assert!(end - start >= FIO_RUNTIME_SECS as f64);

    let after = prom.settled();
    for t in osd_targets.iter().chain([&gateway_target]) {
        let up = prom.value(&format!("up{{instance=\"{t}\"}}"), after);
        assert_eq!(up, 1.0, "{t} scraped");
    }
    let delta = |selector: &str| prom.total(selector, after) - prom.total(selector, before);
    let gw = "job=\"basalt-gateway\",frontend=\"nbd\",op=\"write\"";
    // Each 4 KiB write is one object write at its primary, applied on all three hosts.
    let counted = [
        (
            "gateway writes",
            format!("basalt_frontend_requests_total{{{gw}}}"),
            fio_writes,
        ),
        (
            "gateway bytes written",
            format!("basalt_frontend_bytes_total{{{gw}}}"),
            fio_bytes,
        ),
        (
            "OSD primary writes",
            "basalt_osd_writes_total{job=\"basalt-osd\"}".into(),
            fio_writes,
        ),
        (
            "store writes over 3 replicas",
            "basalt_osd_store_write_seconds_count{job=\"basalt-osd\"}".into(),
            3.0 * fio_writes,
        ),
    ];
    for (what, selector, want) in counted {
        assert_eq!(
            delta(&selector),
            want,
            "{what} during fio's run: Prometheus vs fio"
        );
    }
    for t in &osd_targets {
        let stored = delta(&format!(
            "basalt_osd_store_write_seconds_count{{instance=\"{t}\"}}"
        ));
        assert_eq!(
            stored, fio_writes,
            "store writes on {t} (every host holds a replica)"
        );
    }

    // Quantiles over a window inside the run.
    let at = end - RATE_END_BEFORE_FIO_END_SECS as f64;
    let w = RATE_WINDOW_SECS;

    // Latency: quantiles non-zero, ordered and under a second, at the gateway and the OSDs.
    let quantile = |q: f64, series: &str, selector: &str| {
        prom.value(
            &format!(
                "histogram_quantile({q}, sum by (le) (rate({series}_bucket{selector}[{w}s])))"
            ),
            at,
        )
    };
    let p50 = quantile(0.5, "basalt_frontend_request_seconds", &format!("{{{gw}}}"));
    let p99 = quantile(
        0.99,
        "basalt_frontend_request_seconds",
        &format!("{{{gw}}}"),
    );
    assert!(
        p50 > 0.0 && p50 <= p99 && p99 < 1.0,
        "gateway write p50 {p50} p99 {p99}"
    );
    // At queue depth 16, Little's law bounds the mean latency from fio's rate.
    let mean = delta(&format!("basalt_frontend_request_seconds_sum{{{gw}}}"))
        / delta(&format!("basalt_frontend_request_seconds_count{{{gw}}}"));
    assert!(
        mean > 0.0 && mean <= 16.0 / fio_iops * 1.2,
        "mean {mean} at {fio_iops} IOPS"
    );
    for stage in [
        "basalt_osd_store_write_seconds",
        "basalt_osd_replication_seconds",
        "basalt_osd_queue_wait_seconds",
    ] {
        let p99 = quantile(0.99, stage, "{job=\"basalt-osd\"}");
        assert!(p99 > 0.0 && p99 < 1.0, "{stage} p99 {p99}");
        // The replica hop is part of a write: its p50 is below the gateway's.
        let p50 = quantile(0.5, stage, "{job=\"basalt-osd\"}");
        assert!(
            p50 <= quantile(0.5, "basalt_frontend_request_seconds", &format!("{{{gw}}}")) * 1.5,
            "{stage} p50 {p50}"
        );
    }
    let osds_up = "basalt_client_osds_up{job=\"basalt-gateway\"}";
    assert_eq!(prom.value(osds_up, now_secs()), 3.0);

    // Kill -9 an OSD that does not hold the monitor role (else the monitor's own lease
    // adds to the time the map takes to show it down).
    let monitor = mh.status()["monitor"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let victim = mh
        .osds
        .iter()
        .find(|o| !monitor.starts_with(&format!("osd.{} ", o.id)))
        .unwrap();
    let victim_target = &osd_targets[mh.osds.iter().position(|o| o.id == victim.id).unwrap()];
    victim.proc.kill9().unwrap();
    let killed = Instant::now();
    let bound = MULTIHOST_LEASE_TTL_SECS + SCRAPE_INTERVAL_SECS + DOWN_SLACK_SECS;
    let mut target_down = None;
    let mut map_down = None;
    let mut pending = None;
    // Loop bound: `bound` seconds of 100 ms polls.
    while killed.elapsed().as_secs_f64() < bound
        && (target_down.is_none() || map_down.is_none() || pending.is_none())
    {
        let now = now_secs();
        let t = killed.elapsed().as_secs_f64();
        let up = prom.query(&format!("up{{instance=\"{victim_target}\"}}"), now);
        if target_down.is_none() && up.first().is_some_and(|s| s["value"][1] == "0") {
            target_down = Some(t);
        }
        if map_down.is_none() && prom.value(osds_up, now) == 2.0 {
            map_down = Some(t);
        }
        let alerts = prom.api("/api/v1/alerts");
        let state = alerts["data"]["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["labels"]["alertname"] == "BasaltOsdDown")
            .map(|a| a["state"].as_str().unwrap_or_default().to_string());
        if pending.is_none() && state.is_some() {
            pending = Some(t);
            assert_eq!(state.as_deref(), Some("pending"), "no `for` wait: {alerts}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "after kill -9 of osd.{}: target down at {target_down:?} s, map down at {map_down:?} \
         s, alert pending at {pending:?} s (bound {bound} s)",
        victim.id
    );
    assert!(
        target_down.is_some(),
        "up{{instance={victim_target}}} not 0 within {bound} s"
    );
    assert!(map_down.is_some(), "{osds_up} not 2 within {bound} s");
    assert!(
        pending.is_some(),
        "BasaltOsdDown not pending within {bound} s"
    );
    // Firing once its `for` passed. Loop bound: the `for` plus ALERT_TIMEOUT.
    loop {
        let alerts = prom.api("/api/v1/alerts");
        let firing = alerts["data"]["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| {
                a["labels"]["alertname"] == "BasaltOsdDown"
                    && a["labels"]["instance"] == victim_target.as_str()
                    && a["state"] == "firing"
            });
        if firing {
            break;
        }
        assert!(
            killed.elapsed() < ALERT_TIMEOUT,
            "BasaltOsdDown not firing {ALERT_TIMEOUT:?} after the kill: {alerts}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        killed.elapsed().as_secs_f64() >= pending.unwrap() + TEST_OSD_DOWN_FOR_SECS as f64 - 1.0,
        "the alert fired before its `for` period"
    );
}
