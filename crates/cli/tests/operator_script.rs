//! An operator's provisioning script (tests/operator/provision.sh: `set -e`, no sleeps, no
//! retries) run against a real `basalt up`: pool create → volume create → qemu-io write →
//! resize → info --json parsed by python → exit codes of not found and exists → rm.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use common::*;
use std::process::Command;
use std::time::Duration;

/// Bound on the whole script.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

/// The script, run with the cluster given only through the environment.
fn provision_script() -> Command {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/operator/provision.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(script)
        .env("BASALT", env!("CARGO_BIN_EXE_basalt"))
        .env_remove("BASALT_META")
        .env_remove("BASALT_JSON")
        .env_remove("BASALT_NO_WAIT");
    cmd
}

/// Goal: the script passes on `basalt up` as written, with no sleeps or retries.
#[test]
fn provisioning_script_runs_on_basalt_up() {
    require_tool("qemu-io", "qemu-utils");
    require_tool("python3", "python3");
    let cluster = Cluster::start();
    let mut cmd = provision_script();
    cmd.env("BASALT_CONTROL", &cluster.control)
        .env("NBD_BASE", cluster.server_uri())
        .env("FAILURE_DOMAIN", "osd")
        .current_dir(cluster.scratch());
    let out = run(&mut cmd, SCRIPT_TIMEOUT);
    assert_ok(&out, "tests/operator/provision.sh on basalt up");
    assert!(
        text(&out).contains("provisioned, used and removed"),
        "{}",
        text(&out)
    );
}

/// Goal: on `basalt up` (one host) a pool made with every default serves I/O at once, and a
/// pool the cluster cannot place is refused with the reason, or (on request) made and
/// explained by `basalt status` (tests/operator/one_host_pool.sh).
#[test]
fn a_one_host_pool_with_defaults_serves_and_an_unplaceable_one_is_refused() {
    require_tool("qemu-io", "qemu-utils");
    let cluster = Cluster::start();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/operator/one_host_pool.sh"
    );
    let mut cmd = Command::new("bash");
    cmd.arg(script)
        .env("BASALT", env!("CARGO_BIN_EXE_basalt"))
        .env_remove("BASALT_META")
        .env_remove("BASALT_JSON")
        .env_remove("BASALT_NO_WAIT")
        .env("BASALT_CONTROL", &cluster.control)
        .env("NBD_BASE", cluster.server_uri())
        .current_dir(cluster.scratch());
    let out = run(&mut cmd, SCRIPT_TIMEOUT);
    assert_ok(&out, "tests/operator/one_host_pool.sh on basalt up");
    assert!(
        text(&out).contains("an unplaceable one is refused or explained"),
        "{}",
        text(&out)
    );
}

/// Goal: the same script passes unchanged on a 3-host cluster (etcd, OSDs and the NBD
/// gateway in network namespaces), given the cluster through BASALT_META/BASALT_KEYRING.
#[test]
fn provisioning_script_runs_on_three_hosts() {
    require_tool("qemu-io", "qemu-utils");
    require_tool("python3", "python3");
    let mh = multihost::MultiHost::start(multihost::Layout::default());
    let scratch = tempfile::tempdir().unwrap();
    let uri = mh.uri("");
    let mut cmd = provision_script();
    cmd.env("BASALT_META", &mh.meta_url)
        .env("BASALT_KEYRING", &mh.keyring)
        .env_remove("BASALT_CONTROL")
        .env("NBD_BASE", uri.trim_end_matches('/'))
        .env("FAILURE_DOMAIN", "host")
        .current_dir(scratch.path());
    let out = run(&mut cmd, SCRIPT_TIMEOUT);
    if !out.status.success() {
        panic!(
            "tests/operator/provision.sh on 3 hosts failed:\n{}\n{}",
            text(&out),
            mh.logs_tail()
        );
    }
    assert!(
        text(&out).contains("provisioned, used and removed"),
        "{}",
        text(&out)
    );
}
