//! `basalt bench storage --cluster etcd://...` against a real multi-host cluster (3 hosts in
//! network namespaces, one OSD each, etcd, an iperf3 server on the first host only): checks
//! the STRUCTURE of what it writes (sections, the skipped sweep with its reason, a network row
//! per storage host by iperf3 or by the built-in test, CPU charged to every OSD from its
//! /metrics) and that the benchmark's volumes are gone afterwards, also after Ctrl-C; not
//! the numbers.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use common::{require_tool, run};
use multihost::{basalt_bin, Layout, MultiHost, DAEMON_START};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Bound on the benchmark run (about a minute with a debug build on 2 cores).
const RUN_TIMEOUT: Duration = Duration::from_secs(300);
/// Bound on the interrupted run: reaching its first Basalt step, then stopping.
const INTERRUPT_TIMEOUT: Duration = Duration::from_secs(120);

fn key(ip: &str) -> String {
    ip.replace(['.', ':'], "_")
}

/// Names of the cluster's volumes.
fn volumes(mh: &MultiHost) -> Vec<String> {
    let list: serde_json::Value =
        serde_json::from_str(&mh.cli_ok(&["volume", "ls", "--json"])).unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect()
}

/// Start `basalt bench storage` on `mh`, send it SIGINT once it runs its first step on the
/// Basalt volume, and return its stderr once it exited (non-zero) on its own.
fn interrupted_run(mh: &MultiHost, data: &Path, out: &Path) -> String {
    let log = out.with_extension("stderr");
    let mut child = Command::new(basalt_bin())
        .args(["bench", "storage", "--cluster", &mh.meta_url, "--quick"])
        .env("BASALT_KEYRING", &mh.keyring)
        .args(["--sections", "disk", "--data-dir"])
        .arg(data)
        .arg("--out")
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start basalt bench storage");
    let deadline = Instant::now() + INTERRUPT_TIMEOUT;
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    // Step 5 is the first timed fio run on the Basalt volume (after creating it and writing
    // both targets once).
    while !text().contains("[5/") {
        assert!(
            Instant::now() < deadline,
            "no Basalt step began:\n{}",
            text()
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "exited early:\n{}",
            text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("did not stop after Ctrl-C:\n{}", text());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success(), "an interrupted run fails:\n{}", text());
    text()
}

#[test]
fn bench_storage_measures_an_existing_cluster() {
    // Goal: the benchmark measures a cluster it did not start — network per storage host,
    // disk vs volume with CPU read from every OSD's /metrics, the sweep skipped with a
    // reason — and leaves no volume of its own behind (and the user's volumes alone).
    require_tool("fio", "fio");
    let iperf3 = require_tool("iperf3", "iperf3");
    let mh = MultiHost::start(Layout {
        hosts: 3,
        osds_per_host: 1,
        pgs: 32,
        ..Layout::default()
    });
    let first = mh.hosts[0].clone();
    let server = mh
        .net
        .spawn(
            &first,
            basalt_testcluster::ProcessSpec::new(&iperf3)
                .name("iperf3")
                .args(["-s", "--forceflush", "-B", &first.ip.to_string()]),
        )
        .expect("start an iperf3 server on the first host");
    server
        .wait_for_line("Server listening", DAEMON_START)
        .expect("iperf3 server listening");
    mh.cli_ok(&["volume", "create", "keep", "--size", "64M"]);

    let dir = tempfile::tempdir().unwrap();
    let (data, out) = (dir.path().join("data"), dir.path().join("out"));
    std::fs::create_dir_all(&data).unwrap();
    let result = run(
        Command::new(basalt_bin())
            .args(["bench", "storage", "--cluster", &mh.meta_url, "--quick"])
            // The flag here, the variable in the interrupted run: both reach the cluster.
            .arg("--keyring")
            .arg(&mh.keyring)
            .args(["--sections", "network,disk,scaling"])
            .arg("--data-dir")
            .arg(&data)
            .arg("--out")
            .arg(&out),
        RUN_TIMEOUT,
    );
    assert!(
        result.status.success(),
        "bench storage failed:\n{}\n{}",
        String::from_utf8_lossy(&result.stderr),
        mh.logs_tail()
    );

    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for part in [
        "## Network baseline",
        "## Local disk vs Basalt volume",
        "## Scaling over OSD counts (Simplyblock)",
        "**Not measured on an existing cluster: the sweep starts a fresh `basalt up`",
        "## CPU cost of Basalt",
        "By daemon, over every Basalt step:",
        "## Assessment",
        "Cluster: the existing cluster at `etcd://",
        "was removed from the cluster after the run",
    ] {
        assert!(report.contains(part), "report.md lacks {part:?}:\n{report}");
    }
    assert!(!report.contains("## Torus profiles"), "not selected");

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let env = &json["environment"];
    assert_eq!(env["existing"]["meta_url"], mh.meta_url.as_str());
    assert_eq!(env["existing"]["hosts"].as_array().unwrap().len(), 3);
    // The daemons were read at rest (a figure, not a failure); at rest they may use less
    // than a clock tick in the 2 s sampled, so 0 is a true answer and no bound is checked.
    assert!(
        env["idle_cpu_seconds_per_second"].is_f64(),
        "{}",
        env["idle_cpu_seconds_per_second"]
    );
    // Pool settings come from the cluster's map (the harness makes `rbd`: 3 replicas,
    // min_size 2, 32 PGs here, failure domain host).
    let pool = &env["pool"];
    assert_eq!(pool["name"], "rbd");
    assert_eq!(pool["osds"], 3);
    assert_eq!(pool["replicas"], 3);
    assert_eq!(pool["min_size"], 2);
    assert_eq!(pool["pgs"], 32);
    assert_eq!(pool["failure_domain"], "host");
    let sections = json["sections"].as_array().unwrap();
    let ids: Vec<&str> = sections.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["network", "disk", "scaling"]);
    assert_eq!(sections[2]["status"]["state"], "not_measured");

    // The network: iperf3 where its server answers (the first host), the built-in test on
    // the others; a positive figure for each.
    let net = sections[0]["rows"].as_array().unwrap();
    for (i, host) in mh.hosts.iter().enumerate() {
        let (kind, tool) = if i == 0 {
            ("tcp_throughput", "iperf3 ")
        } else {
            ("stream_throughput", "built-in")
        };
        let k = format!("{kind}_{}", key(&host.ip.to_string()));
        let row = net
            .iter()
            .find(|r| r["key"] == k.as_str())
            .unwrap_or_else(|| panic!("no network row {k}: {net:?}"));
        let f = &row["baseline"];
        assert!(f["value"].as_f64().unwrap_or(0.0) > 0.0, "{row}");
        assert!(f["command"].as_str().unwrap().starts_with(tool), "{row}");
    }

    // Every Basalt step is charged CPU from each OSD and from the gateway process.
    let mut per_daemon = std::collections::BTreeMap::<String, f64>::new();
    for row in sections[1]["rows"].as_array().unwrap() {
        let cpu = &row["basalt"]["cpu"];
        assert!(cpu["cpu_seconds"].as_f64().unwrap() > 0.0, "{row}");
        assert!(cpu["per_gib"].as_f64().unwrap() > 0.0, "{row}");
        assert!(cpu["per_1000_ios"].as_f64().unwrap() > 0.0, "{row}");
        assert!(cpu.get("missing").is_none(), "every daemon was read: {row}");
        for d in cpu["daemons"].as_array().unwrap() {
            *per_daemon
                .entry(d["name"].as_str().unwrap().to_string())
                .or_default() += d["cpu_seconds"].as_f64().unwrap();
            assert!(d["resident_bytes"].as_u64().unwrap() > 0, "{d}");
        }
    }
    for o in &mh.osds {
        let name = format!("osd.{}", o.id);
        assert!(
            per_daemon.get(&name).copied().unwrap_or(0.0) > 0.0,
            "{name}: {per_daemon:?}"
        );
    }
    assert!(per_daemon["basalt bench (NBD gateway)"] > 0.0);

    // Only the user's volume is left.
    assert_eq!(volumes(&mh), ["keep"], "the benchmark removed its volumes");
    assert!(
        std::fs::read_dir(&data).unwrap().next().is_none(),
        "scratch left in the data dir"
    );

    // Ctrl-C in the middle of a run: it stops, removes its volume, and reports what it did.
    let out = dir.path().join("interrupted");
    let stderr = interrupted_run(&mh, &data, &out);
    assert!(stderr.contains("interrupted (Ctrl-C)"), "{stderr}");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("The run was interrupted (Ctrl-C)"),
        "{report}"
    );
    assert!(report.contains("was removed from the cluster after the run"));
    assert_eq!(volumes(&mh), ["keep"], "removed after Ctrl-C too");
}

/// `basalt bench ARGS` with no BASALT_* access variable set; returns (success, stderr).
fn bench(args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(basalt_bin());
    cmd.arg("bench").args(args);
    for var in [
        "BASALT_META",
        "BASALT_META_CA",
        "BASALT_META_CERT",
        "BASALT_META_KEY",
        "BASALT_META_USER",
        "BASALT_META_PASSWORD_FILE",
        "BASALT_KEYRING",
        "BASALT_DATA_TLS",
    ] {
        cmd.env_remove(var);
    }
    let out = run(&mut cmd, RUN_TIMEOUT);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bench_storage_uses_the_access_flags_or_refuses_them() {
    // Goal: `bench storage --cluster etcd://...` reaches the cluster with every access flag
    // its daemons take (a data-plane TLS cluster measured with --keyring and --data-tls;
    // each etcd flag reaches the metadata client, shown by its own error), and the
    // benchmarks that start their own clusters refuse those flags instead of ignoring them.
    require_tool("fio", "fio");
    let (ok, stderr) = bench(&["storage", "--keyring", "/k", "--quick"]);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("--keyring (or BASALT_KEYRING) is for an existing cluster"),
        "{stderr}"
    );
    let (ok, stderr) = bench(&["nbd", "--data-tls", "/tls"]);
    assert!(
        !ok && stderr.contains("--data-tls (or BASALT_DATA_TLS)"),
        "{stderr}"
    );
    let (ok, stderr) = bench(&["storage", "--meta-user", "u", "--quick"]);
    assert!(
        !ok && stderr.contains("--meta-user (or BASALT_META_USER)"),
        "{stderr}"
    );

    let mh = MultiHost::start(Layout {
        hosts: 3,
        osds_per_host: 1,
        pgs: 8,
        data_tls: true,
        ..Layout::default()
    });
    let tls = mh.data_tls.clone().expect("the cluster's TLS directory");
    let (keyring, tls) = (mh.keyring.to_str().unwrap(), tls.to_str().unwrap());
    let url = mh.meta_url.as_str();
    let dir = tempfile::tempdir().unwrap();
    let (data, out) = (dir.path().join("data"), dir.path().join("out"));
    std::fs::create_dir_all(&data).unwrap();
    let (data_s, out_s) = (data.to_str().unwrap(), out.to_str().unwrap());
    let (ok, stderr) = bench(&[
        "storage",
        "--cluster",
        url,
        "--keyring",
        keyring,
        "--data-tls",
        tls,
        "--smoke",
        "--sections",
        "disk",
        "--data-dir",
        data_s,
        "--out",
        out_s,
    ]);
    assert!(
        ok,
        "bench storage over data-plane TLS failed:\n{stderr}\n{}",
        mh.logs_tail()
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let rows = json["sections"][0]["rows"].as_array().unwrap();
    assert!(!rows.is_empty(), "{json}");
    for row in rows {
        let basalt = &row["basalt"];
        assert!(basalt["value"].as_f64().is_some_and(|v| v > 0.0), "{row}");
    }
    assert!(json["command"]
        .as_str()
        .unwrap()
        .contains(&format!("--keyring {keyring} --data-tls {tls}")));
    assert_eq!(
        volumes(&mh),
        Vec::<String>::new(),
        "the bench volume was removed"
    );

    // Each flag is used: its misuse is reported by what it configures.
    let with = |extra: &[&str]| {
        let mut args = vec!["storage", "--cluster", url, "--smoke", "--sections", "disk"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--data-dir", data_s, "--out", out_s]);
        bench(&args)
    };
    for (extra, want) in [
        (&["--data-tls", tls][..], "--keyring FILE is required"),
        (
            &["--keyring", keyring, "--data-tls", "/no/tls"][..],
            "--data-tls: load the data-plane TLS credentials of /no/tls",
        ),
        (
            &["--keyring", "/no/keyring", "--data-tls", tls][..],
            "--keyring /no/keyring",
        ),
        (
            &[
                "--keyring",
                keyring,
                "--data-tls",
                tls,
                "--meta-ca",
                "/no/ca.pem",
            ][..],
            "TLS files were given for a plain etcd:// URL",
        ),
        (
            &[
                "--keyring",
                keyring,
                "--data-tls",
                tls,
                "--meta-user",
                "bench",
            ][..],
            "--meta-user needs --meta-password-file",
        ),
        (
            &[
                "--keyring",
                keyring,
                "--data-tls",
                tls,
                "--meta",
                "etcd://10.9.9.9:2379",
            ][..],
            "name different clusters",
        ),
    ] {
        let (ok, stderr) = with(extra);
        assert!(!ok && stderr.contains(want), "{extra:?}: {stderr}");
    }
}
