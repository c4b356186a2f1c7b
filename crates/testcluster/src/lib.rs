//! A test harness that runs a multi-host Basalt cluster on one machine and injects faults.
//! It starts real processes from command lines and knows nothing of Basalt's internals.
//!
//! ```no_run
//! use basalt_testcluster::{Net, ProcessSpec};
//! use std::time::Duration;
//!
//! # fn main() -> anyhow::Result<()> {
//! let net = Net::new()?;
//! let etcd_host = net.add_host("etcd")?;
//! let etcd = net.start_etcd(&etcd_host)?;
//! let h1 = net.add_host("host1")?;
//! let osd = net.spawn(
//!     &h1,
//!     ProcessSpec::new("/path/to/basalt").args([
//!         "osd",
//!         "--meta",
//!         &format!("etcd://{}:2379", etcd_host.ip),
//!         "--listen",
//!         &format!("{}:7000", h1.ip),
//!     ]),
//! )?;
//! osd.wait_for_line("serving", Duration::from_secs(30))?;
//! net.partition_all(&h1)?;
//! net.heal(&h1)?;
//! osd.kill9()?;
//! osd.restart()?;
//! etcd.kill9()?;
//! etcd.restart()?;
//! # Ok(())
//! # }
//! ```
//!
//! **Hosts.** [`Net::new`] makes a Linux bridge `btIb` (I: the Net's index, unique among
//! live Nets of all processes) with the root namespace on 10.77.I.1/24; each
//! [`Net::add_host`] makes a namespace `btI-NAME` joined to it by a veth pair (`eth0`
//! inside, 10.77.I.N/24, N from 2), with `lo` up and no default route. Test code in the root
//! namespace (fio, qemu-io) reaches every host; [`Host::enter`] runs code inside one.
//!
//! **Fallback.** Without namespaces (not root, no `ip`, `ip netns add` fails) hosts get
//! loopback addresses 127.77.I.N in the root namespace, and one stderr line says so;
//! [`Net::new_loopback`] forces that mode. Partitions are then nftables rules on those
//! addresses and cut only traffic whose source or destination is a host address: a listener
//! on a partitioned host is unreachable, but its own outgoing connections leave from
//! 127.0.0.1 unless the program binds its host address. Without `nft`, `partition` fails.
//!
//! **Faults.** Processes: [`Proc::kill9`], [`Proc::stop`]/[`Proc::cont`] (SIGSTOP/SIGCONT),
//! [`Proc::terminate`], [`Proc::restart`]. Network: [`Net::partition`],
//! [`Net::partition_all`], [`Net::heal`] (nftables in the host's namespace) and
//! [`Net::limit_bandwidth`] (`tc tbf`). Latency and loss injection are not supported: this
//! kernel has no `tc netem`, so they would need a userspace proxy between the hosts.
//!
//! **Cleanup.** Dropping the [`Net`], also during a panic, SIGKILLs every process it started
//! (their process groups, then anything left in its namespaces), deletes its namespaces,
//! links and nftables tables and its temporary directory. Each Net writes what it creates,
//! before creating it, to `/run/basalt-testcluster/net-I.state` with its owner's pid; a
//! later [`Net::new`] (or [`cleanup_stale`]) removes what a dead owner left behind.
//!
//! Every wait is bounded. Needs root and the Debian packages iproute2 and nftables (plus
//! etcd-server for [`Net::start_etcd`]).

pub mod basalt;
mod cmd;
mod etcd;
mod firewall;
mod host;
mod net;
mod netns;
mod process;
mod registry;

pub use basalt::{BasaltCluster, Layout, OsdProc};
pub use etcd::{Etcd, ETCD_BIN, ETCD_CLIENT_PORT, ETCD_PEER_PORT, ETCD_READY_WAIT};
pub use host::Host;
pub use net::Net;
pub use process::{Proc, ProcessSpec};
pub use registry::cleanup_stale;

#[cfg(test)]
mod tests {
    // Goal: the handles can be shared with threads a test spawns.
    #[test]
    fn handles_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<super::Net>();
        assert_send_sync::<super::Proc>();
        assert_send_sync::<super::Etcd>();
        assert_send_sync::<super::Host>();
    }
}
