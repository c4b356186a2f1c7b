//! The S3 gateway of `basalt up` driven by real S3 clients.

mod common;

use common::{assert_ok, parse_json, run, Cluster};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;

/// Longest run of one client suite.
const SUITE_TIMEOUT: Duration = Duration::from_secs(600);

/// The access key pair `basalt up` wrote to DATA_DIR/s3-credentials.
fn credentials(data_dir: &Path) -> (String, String) {
    let text = std::fs::read_to_string(data_dir.join("s3-credentials"))
        .expect("basalt up writes DATA_DIR/s3-credentials");
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().strip_prefix('='))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("{name} in s3-credentials:\n{text}"))
    };
    (field("aws_access_key_id"), field("aws_secret_access_key"))
}

fn endpoint(cluster: &Cluster) -> String {
    format!(
        "http://{}",
        cluster.s3_addr.expect("basalt up prints its S3 address")
    )
}

/// boto3: bucket and object life cycle, metadata, ranges, conditionals, listing 2,500 keys
/// with delimiters and pagination, multipart (3 x 5 MiB + tail), copies, presigned GET/PUT,
/// a wrong secret, anonymous requests, deletes.
#[test]
fn boto3_suite() {
    let cluster = Cluster::start();
    let (access, secret) = credentials(cluster.data_dir());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3/boto3_suite.py");
    let out = run(
        Command::new("python3")
            .arg(&script)
            .env("S3_ENDPOINT", endpoint(&cluster))
            .env("AWS_ACCESS_KEY_ID", access)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env_remove("AWS_PROFILE")
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
        SUITE_TIMEOUT,
    );
    let text = format!(
        "--- stdout ---\n{}\n--- stderr ---\n{}\n--- basalt stderr (tail) ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        tail(&cluster.stderr_text(), 4000)
    );
    assert!(out.status.success(), "boto3 suite failed:\n{text}");
    assert!(text.contains("boto3 suite passed"), "{text}");
}

/// Bytes used on all OSDs (every replica counted).
fn used_bytes(cluster: &Cluster) -> u64 {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt"));
    cmd.args(["status", "--json", "--interval", "0", "--control"])
        .arg(cluster.control.to_string());
    let out = run(&mut cmd, Duration::from_secs(30));
    assert_ok(&out, "basalt status --json");
    let status = parse_json(&out.stdout, "basalt status --json");
    status["osds"]
        .as_array()
        .expect("osds")
        .iter()
        .map(|o| o["stats"]["used_bytes"].as_u64().expect("used_bytes"))
        .sum()
}

/// A gateway killed (-9) in the middle of a 48 MiB PUT: after the restart the object is not
/// visible, and the sweeper reclaims the chunks that reached the OSDs (with
/// `--s3-reclaim-after 2`, within seconds).
#[test]
fn upload_interrupted_by_a_crash_is_invisible_and_reclaimed() {
    let mut cluster = Cluster::start_with(&["--s3-reclaim-after", "2"]);
    let (access, secret) = credentials(cluster.data_dir());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3/interrupted_upload.py");
    let baseline = used_bytes(&cluster);
    let mut upload = Command::new("python3")
        .arg(&script)
        .args(["start", &endpoint(&cluster)])
        .env("AWS_ACCESS_KEY_ID", &access)
        .env("AWS_SECRET_ACCESS_KEY", &secret)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the uploader");
    let mut lines = BufReader::new(upload.stdout.take().expect("piped")).lines();
    let sent = lines.next().and_then(|l| l.ok());
    assert_eq!(
        sent.as_deref(),
        Some("SENT"),
        "the uploader sent half the body"
    );
    // Let the gateway write what it received, then kill it mid-upload.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while used_bytes(&cluster) < baseline + (30 << 20) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    // The chunks of a long upload are made durable at its end (one FLUSH of every OSD); flush
    // now, through NBD, so the crash leaves them on disk for the sweeper to find.
    common::qemu_io_ok(&cluster.uri("vol0"), &["flush"]);
    cluster.kill9();
    let _ = upload.kill();
    let _ = upload.wait();
    cluster.restart();
    let after_crash = used_bytes(&cluster);
    assert!(
        after_crash >= baseline + (20 << 20),
        "the half upload's chunks survived the crash (so there is something to reclaim): \
         baseline {baseline}, after {after_crash}"
    );
    let out = run(
        Command::new("python3")
            .arg(&script)
            .args(["check", &endpoint(&cluster)])
            .env("AWS_ACCESS_KEY_ID", &access)
            .env("AWS_SECRET_ACCESS_KEY", &secret),
        Duration::from_secs(60),
    );
    assert_ok(&out, "the interrupted object is not visible");
    // The sweeper runs every second and reclaims intents older than 2 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut now = after_crash;
    while now > baseline + (2 << 20) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        now = used_bytes(&cluster);
    }
    assert!(
        now <= baseline + (2 << 20),
        "space reclaimed: baseline {baseline}, after the crash {after_crash}, now {now}\n{}",
        tail(&cluster.stderr_text(), 3000)
    );
    assert!(
        cluster
            .stderr_text()
            .contains("reclaimed the data of unfinished uploads"),
        "the sweeper says what it did"
    );
}

fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    &s[start..]
}
