//! The S3 gateway of `basalt up` driven by real S3 clients.

mod common;

use common::{run, Cluster};
use std::path::Path;
use std::process::Command;
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

fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    &s[start..]
}
