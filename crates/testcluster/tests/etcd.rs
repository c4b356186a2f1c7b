//! Tests of the real etcd on a host.

use basalt_testcluster::{Host, Net, ProcessSpec};
use std::time::Duration;

/// Bound of one etcdctl command.
const ETCDCTL_TIMEOUT: Duration = Duration::from_secs(10);

fn etcdctl(net: &Net, from: &Host, endpoint: &str, args: &[&str]) -> String {
    let out = net
        .run(
            from,
            ProcessSpec::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .arg(format!("--endpoints={endpoint}"))
                .arg("--command-timeout=5s")
                .args(args),
            ETCDCTL_TIMEOUT,
        )
        .expect("run etcdctl");
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// Goal: etcd starts in a namespace, answers another host, and keeps its data across kill9 +
// restart.
#[test]
fn etcd_survives_kill9_and_restart_with_its_data() {
    let net = Net::new().unwrap();
    let etcd_host = net.add_host("etcd").unwrap();
    let client = net.add_host("client").unwrap();
    let etcd = net.start_etcd(&etcd_host).unwrap();
    assert_eq!(etcd.endpoint(), format!("http://{}:2379", etcd_host.ip));
    etcdctl(&net, &client, &etcd.endpoint(), &["put", "basalt/k", "v1"]);

    let old = etcd.pid();
    etcd.kill9().unwrap();
    assert!(!std::path::Path::new(&format!("/proc/{old}")).exists());
    etcd.restart().unwrap();
    assert_ne!(etcd.pid(), old);
    let got = etcdctl(
        &net,
        &client,
        &etcd.endpoint(),
        &["get", "basalt/k", "--print-value-only"],
    );
    assert_eq!(got.trim(), "v1");
    assert!(etcd.data_dir().join("member").exists());
}
