//! Data-plane TLS with a real `basalt up`: `--data-tls DIR` makes the cluster CA and
//! certificate on first start (keys mode 0600), its NBD gateway reaches the OSDs and the
//! OSDs each other over loopback TCP inside TLS (`--no-local-path`), qemu-io writes and
//! reads through it, and a restart reuses the same credentials. (Refusals of plaintext and
//! foreign-CA peers: crates/osd/tests/data_tls.rs.)
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;

/// Goal: I/O through an NBD gateway whose every OSD connection is TLS, across a restart.
#[test]
fn basalt_up_with_data_tls_serves_io_over_tls() {
    let tls = tempfile::tempdir().unwrap();
    let dir = tls.path().join("data-tls");
    let dir_s = dir.display().to_string();
    let mut c = Cluster::start_with(&["--no-local-path", "--data-tls", &dir_s]);
    for (file, mode) in [
        ("ca-cert.pem", 0o644),
        ("ca-key.pem", 0o600),
        ("cert.pem", 0o644),
        ("key.pem", 0o600),
    ] {
        let meta = std::fs::metadata(dir.join(file)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, mode, "{file}");
    }
    let cert = std::fs::read(dir.join("cert.pem")).unwrap();
    let uri = c.uri("vol0");
    qemu_io_ok(&uri, &["write -P 0x5a 0 1M", "read -P 0x5a 0 1M"]);
    qemu_io_ok(&uri, &["write -P 0x3c 64M 128k", "read -P 0x3c 64M 128k"]);

    c.stop();
    c.restart();
    assert_eq!(
        std::fs::read(dir.join("cert.pem")).unwrap(),
        cert,
        "a restart reuses the credentials"
    );
    qemu_io_ok(
        &c.uri("vol0"),
        &["read -P 0x5a 0 1M", "read -P 0x3c 64M 128k"],
    );
    let log = c.stderr_text();
    assert!(
        !log.contains("refused a"),
        "no connection was refused:\n{log}"
    );
}
