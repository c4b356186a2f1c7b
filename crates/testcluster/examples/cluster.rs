//! Start a multi-host Basalt cluster on this machine (hosts in network namespaces, as root;
//! etcd, OSDs, the pool `rbd` and an NBD gateway, as the end-to-end tests use) and keep it
//! until Enter or end of input, then tear it down. For trying tools against a real cluster:
//!
//! ```sh
//! cargo build --release --bin basalt
//! cargo run --release -p basalt-testcluster --example cluster -- target/release/basalt 3 2
//! # in another terminal, with the URL it prints:
//! target/release/basalt bench storage --cluster etcd://10.77.X.2:2379/basalt-test --quick
//! ```

use anyhow::Context;
use basalt_testcluster::{BasaltCluster, Layout};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: cluster BASALT_BINARY [HOSTS (3)] [OSDS_PER_HOST (2)]";
    let basalt =
        std::fs::canonicalize(args.next().context(usage)?).context("find the basalt binary")?;
    let number = |arg: Option<String>, default: usize| -> anyhow::Result<usize> {
        arg.map_or(Ok(default), |a| a.parse().context(usage))
    };
    let layout = Layout {
        hosts: number(args.next(), 3)?,
        osds_per_host: number(args.next(), 2)?,
        ..Layout::default()
    };
    let cluster = BasaltCluster::start(layout, basalt)?;
    println!("metadata: {}", cluster.meta_url);
    for (i, h) in cluster.hosts.iter().enumerate() {
        let osds: Vec<String> = cluster
            .osds
            .iter()
            .filter(|o| o.host == i)
            .map(|o| format!("osd.{}", o.id))
            .collect();
        println!("{} at {}: {}", h.name, h.ip, osds.join(", "));
    }
    println!("NBD gateway: {}", cluster.uri("VOLUME"));
    println!("Press Enter (or end the input) to stop the cluster.");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    drop(cluster);
    Ok(())
}
