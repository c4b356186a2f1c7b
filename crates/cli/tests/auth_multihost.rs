//! Data-plane authentication of a multi-host cluster, end to end with real processes: daemons
//! refuse to start without the cluster's keyring or with another cluster's; a hypervisor's
//! own key (`basalt auth add`) serves a volume through its own `basalt nbd`; revoking that key
//! (`basalt auth rm`) stops its I/O at once without restarting an OSD, while others go on;
//! with data-plane TLS on, I/O runs inside TLS and a plaintext gateway is refused.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use common::{require_tool, run};
use multihost::{basalt_bin, Layout, MultiHost};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// `basalt ARGS` with the cluster's metadata and no keyring unless `keyring` names one.
fn basalt(mh: &MultiHost, args: &[&str], keyring: Option<&std::path::Path>) -> Output {
    let mut cmd = Command::new(basalt_bin());
    cmd.args(args)
        .env("BASALT_META", &mh.meta_url)
        .env_remove("BASALT_KEYRING")
        .env("RUST_LOG", "warn");
    if let Some(k) = keyring {
        cmd.env("BASALT_KEYRING", k);
    }
    run(&mut cmd, CLI_TIMEOUT)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn sum_metric(mh: &MultiHost, name: &str) -> u64 {
    mh.osds
        .iter()
        .map(|o| {
            mh.osd_metrics(o.id)
                .lines()
                .filter(|l| l.starts_with(name))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// qemu-io on an NBD URI; returns whether it succeeded, and its output.
fn qemu_io(uri: &str, cmd: &str) -> (bool, String) {
    let out = run(
        Command::new(require_tool("qemu-io", "qemu-utils")).args(["-f", "raw", uri, "-c", cmd]),
        Duration::from_secs(90),
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && !text.contains("failed"), text)
}

struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Goal: every refusal a keyring mistake deserves, and a revoked hypervisor key that stops
/// working within seconds while the cluster's own gateway keeps serving.
#[test]
fn keys_are_required_checked_and_revocable() {
    let mh = MultiHost::start(Layout::default());
    let dir = tempfile::tempdir().unwrap();

    // No keyring: an OSD refuses to start, and says how to get one.
    let osd_dir = dir.path().join("osd");
    let osd_dir_arg = osd_dir.display().to_string();
    let listen = format!("{}:7999", mh.hosts[0].ip);
    let osd = ["osd", "--data", &osd_dir_arg, "--listen", &listen];
    let o = basalt(&mh, &osd, None);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--keyring FILE is required"),
        "{}",
        stderr(&o)
    );

    // Another cluster's keyring (made on another etcd namespace): refused.
    let foreign = dir.path().join("foreign.keyring");
    let other_meta = format!("{}-other", mh.meta_url);
    let o = basalt(
        &mh,
        &[
            "cluster",
            "init",
            "--meta",
            &other_meta,
            "--keyring",
            foreign.to_str().unwrap(),
            "--json",
        ],
        None,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let init: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(init["keyring"].as_str(), foreign.to_str(), "{init}");
    assert_eq!(init["data_tls_made"], false, "{init}");
    let o = basalt(&mh, &osd, Some(&foreign));
    assert!(
        stderr(&o).contains("does not belong to this cluster"),
        "{}",
        stderr(&o)
    );
    // A keyring others can read: refused before anything is sent.
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o640)).unwrap();
    let o = basalt(&mh, &osd, Some(&foreign));
    assert!(stderr(&o).contains("chmod 600"), "{}", stderr(&o));
    // The cluster's secret is made once.
    let again = dir.path().join("again.keyring");
    let o = basalt(
        &mh,
        &["cluster", "init", "--keyring", again.to_str().unwrap()],
        None,
    );
    assert!(
        stderr(&o).contains("already has a keyring"),
        "{}",
        stderr(&o)
    );
    assert!(
        !again.exists(),
        "no keyring is left behind by a refused init"
    );

    // A hypervisor's key: data capabilities, file mode 0600, listed without its key.
    let hv1 = dir.path().join("hv1.keyring");
    mh.cli_ok(&["auth", "add", "client.hv1", "--out", hv1.to_str().unwrap()]);
    let mode = std::fs::metadata(&hv1).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let key = std::fs::read_to_string(&hv1).unwrap();
    let ls = mh.cli_ok(&["auth", "ls"]);
    assert!(ls.contains("client.hv1") && ls.contains("data"), "{ls}");
    let hex = key.lines().find_map(|l| l.strip_prefix("key = ")).unwrap();
    assert!(!ls.contains(hex), "auth ls shows no key");
    // With --json and no --out, the keyring comes inside the document; rm says what went.
    let added: serde_json::Value =
        serde_json::from_str(&mh.cli_ok(&["auth", "add", "client.js", "--json"])).unwrap();
    assert_eq!(added["entity"], "client.js", "{added}");
    assert_eq!(added["caps"], "data", "{added}");
    assert!(added["keyring_path"].is_null(), "{added}");
    assert!(
        added["keyring"].as_str().unwrap().contains("key = "),
        "{added}"
    );
    let removed: serde_json::Value =
        serde_json::from_str(&mh.cli_ok(&["auth", "rm", "client.js", "--json"])).unwrap();
    assert_eq!(removed["removed"], "client.js");
    // Its keyring cannot add keys (it holds no cluster secret).
    let o = basalt(&mh, &["auth", "add", "client.x"], Some(&hv1));
    assert!(
        stderr(&o).contains("needs the cluster secret"),
        "{}",
        stderr(&o)
    );

    mh.cli_ok(&["volume", "create", "v", "--size", "64M"]);
    let port = 10_899;
    let gw = Gateway(
        Command::new(basalt_bin())
            .args(["nbd", "--meta", &mh.meta_url, "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .args(["--metrics-listen", "off"])
            .env("BASALT_KEYRING", &hv1)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let hv_uri = format!("nbd://127.0.0.1:{port}/v");
    let deadline = Instant::now() + Duration::from_secs(30);
    // Bound: 30 s of 200 ms rounds for the gateway to listen.
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the hv1 gateway did not start");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ok, text) = qemu_io(&hv_uri, "write -P 0x5a 0 1M");
    assert!(ok, "hv1 writes: {text}");
    let (ok, text) = qemu_io(&hv_uri, "read -P 0x5a 0 1M");
    assert!(ok, "hv1 reads back: {text}");
    let accepted = sum_metric(&mh, "basalt_osd_auth_accepted_total");
    assert!(accepted >= 1, "handshakes counted: {accepted}");

    // Revoke: within seconds its sessions are closed and its I/O fails; no OSD restarts.
    let revoked_before = sum_metric(&mh, "basalt_osd_auth_revoked_sessions_total");
    mh.cli_ok(&["auth", "rm", "client.hv1"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while sum_metric(&mh, "basalt_osd_auth_revoked_sessions_total") == revoked_before {
        assert!(
            Instant::now() < deadline,
            "no OSD closed the revoked sessions"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // One OSD closing its sessions does not mean all have learned of the removal yet: the
    // read's OSD may take a moment longer. Bound: 15 s of reads 250 ms apart.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let start = Instant::now();
        let (ok, text) = qemu_io(&hv_uri, "read -P 0x5a 0 1M");
        if !ok {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the refusal is not retried for minutes: {:?}",
                start.elapsed()
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a revoked key still reads after 15 s: {text}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(sum_metric(&mh, "basalt_osd_auth_refused_total") >= 1);
    // The cluster's own gateway (admin keyring) is untouched and sees hv1's data.
    let (ok, text) = qemu_io(&mh.uri("v"), "read -P 0x5a 0 1M");
    assert!(ok, "the admin gateway reads: {text}");
    drop(gw);
}

/// Goal: a multi-host cluster with data-plane TLS (`cluster init --data-tls`, every daemon
/// with `BASALT_DATA_TLS`) serves I/O through its gateway with every OSD connection inside
/// TLS; a gateway without the TLS directory is refused by the OSDs at once, with a reason.
#[test]
fn data_plane_tls_cluster_serves_tls_and_refuses_plaintext() {
    let mh = MultiHost::start(Layout {
        data_tls: true,
        ..Layout::default()
    });
    let tls = mh.data_tls.clone().unwrap();
    for f in ["ca-cert.pem", "ca-key.pem", "cert.pem", "key.pem"] {
        assert!(tls.join(f).exists(), "cluster init made {f}");
    }
    mh.cli_ok(&["volume", "create", "v", "--size", "64M"]);
    let (ok, text) = qemu_io(&mh.uri("v"), "write -P 0x6b 0 1M");
    assert!(ok, "writes through the TLS data plane: {text}");
    let (ok, text) = qemu_io(&mh.uri("v"), "read -P 0x6b 0 1M");
    assert!(ok, "reads back: {text}");

    let port = 10_898;
    let _gw = Gateway(
        Command::new(basalt_bin())
            .args(["nbd", "--meta", &mh.meta_url, "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .args(["--metrics-listen", "off"])
            .env("BASALT_KEYRING", &mh.keyring)
            .env_remove("BASALT_DATA_TLS")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    // Bound: 30 s of 200 ms rounds for the gateway to listen.
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the plaintext gateway did not start"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let start = Instant::now();
    let (ok, text) = qemu_io(&format!("nbd://127.0.0.1:{port}/v"), "read -P 0x6b 0 1M");
    assert!(!ok, "a plaintext gateway reads: {text}");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "the refusal is not retried for minutes: {:?}",
        start.elapsed()
    );
    // An OSD counts a refusal after answering it: poll its counters, bounded (5 s).
    let count = || -> u64 {
        mh.osds
            .iter()
            .flat_map(|o| {
                mh.osd_metrics(o.id)
                    .lines()
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .filter(|l| {
                l.starts_with("basalt_osd_auth_refused_total") && l.contains("reason=\"plaintext\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut refused = count();
    while refused < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        refused = count();
    }
    assert!(refused >= 1, "the OSDs count the plaintext peer");
}
