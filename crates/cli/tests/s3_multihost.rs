//! S3 on the multi-host cluster: two stateless `basalt s3` gateways in front of 3 hosts ×
//! 2 OSDs serve the same buckets, and keep serving every byte after an OSD is killed.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use basalt_testcluster::ProcessSpec;
use common::{assert_ok, run};
use multihost::{basalt_bin, Layout, MultiHost, DAEMON_START};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const S3_PORTS: [u16; 2] = [9000, 9001];

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
            .args(["--master-key", master]);
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
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3/two_gateways.py");
    let mut writers = Command::new("python3")
        .arg(path)
        .arg("versions")
        .args(&endpoints)
        .env("AWS_ACCESS_KEY_ID", access)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start two_gateways.py versions");
    let mut stdout = std::io::BufReader::new(writers.stdout.take().expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).expect("read the script's first line");
    assert!(line.contains("WRITING"), "{line}");
    std::thread::sleep(Duration::from_secs(3));
    gateways[0].kill9().expect("kill -9 gateway A");
    std::thread::sleep(Duration::from_secs(1));
    gateways[0].restart().expect("restart gateway A");
    gateways[0]
        .wait_for_line("S3 gateway serving", DAEMON_START)
        .unwrap_or_else(|e| panic!("gateway A did not restart: {e:#}\n{}", gateways[0].log()));
    let status = common::wait_timeout(&mut writers, Duration::from_secs(300));
    if status.is_none() {
        let _ = writers.kill();
    }
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).ok();
    let mut errors = String::new();
    if let Some(mut e) = writers.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut errors).ok();
    }
    assert!(
        status.is_some_and(|s| s.success()) && rest.contains("VERSIONS"),
        "two_gateways.py versions failed ({status:?}):\n{rest}\n{errors}"
    );
    // A removed key stops working (gateways cache a key for at most 5 s).
    mh.cli_ok(&["s3", "key", "rm", access]);
    std::thread::sleep(Duration::from_secs(6));
    let out = run(
        Command::new("python3")
            .args(["-c", "import boto3,sys; boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1', aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3]).list_buckets()"])
            .args([&endpoints[1], access, secret]),
        Duration::from_secs(60),
    );
    assert!(!out.status.success(), "a removed key is refused");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("InvalidAccessKeyId"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(gateways);
}
