//! Network faults: partitions (nftables drop rules) and bandwidth caps (`tc tbf`).
//!
//! Namespace mode: `partition(A, [B])` puts the table `inet basalt_testcluster` into A's
//! namespace, dropping packets from B on input and to B on output, so both directions are cut
//! from A's side alone; `partition_all(A)` drops everything but `lo`. Loopback mode: one table
//! `inet basalt_tc_I_N` per host in the root namespace, matching the hosts' 127.77.I.N
//! addresses on output (see the crate docs for what that cannot cut).

use crate::cmd::{self, run_tool};
use crate::host::Host;
use crate::net::{Mode, Net};
use crate::registry::Resource;
use anyhow::{bail, Context, Result};
use std::net::Ipv4Addr;

/// The harness's table inside a host namespace.
const NETNS_TABLE: &str = "basalt_testcluster";
/// Prefix of the per-host tables of loopback mode in the root namespace.
const ROOT_TABLE_PREFIX: &str = "basalt_tc_";
/// Priority of the harness's chains: before the usual filter chains (priority 0).
const CHAIN_PRIORITY: i32 = -10;
/// The queue a `tbf` cap may build before it drops, in milliseconds.
const TBF_LATENCY_MS: u32 = 100;

/// Runs an nft script atomically, inside `ns` or in the root namespace.
fn nft(ns: Option<&str>, script: &str) -> Result<()> {
    let nft =
        cmd::tool("nft").context("`nft` not found: partitions need the Debian package nftables")?;
    let nft = nft.to_string_lossy();
    match ns {
        Some(ns) => run_tool("ip", &["netns", "exec", ns, &nft, "-f", "-"], Some(script)),
        None => run_tool(&nft, &["-f", "-"], Some(script)),
    }?;
    Ok(())
}

/// The script lines that create `table` (if missing) with base chains on `hooks`.
fn table_script(table: &str, hooks: &[&str]) -> String {
    let mut s = format!("add table inet {table}\n");
    for hook in hooks {
        s += &format!(
            "add chain inet {table} {hook} {{ type filter hook {hook} priority {CHAIN_PRIORITY} ; policy accept ; }}\n"
        );
    }
    s
}

/// Deletes an inet table; a missing table (or missing nft) is no error.
fn delete_table(ns: Option<&str>, table: &str) -> Result<()> {
    // SAFETY: geteuid(2) cannot fail. Without root no table can have been created.
    if cmd::tool("nft").is_none() || unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    // Adding first makes the delete valid whether or not the table exists.
    nft(
        ns,
        &format!("add table inet {table}\ndelete table inet {table}\n"),
    )
}

/// Deletes a loopback-mode table from the root namespace (cleanup).
pub(crate) fn delete_root_table(table: &str) -> Result<()> {
    delete_table(None, table)
}

/// Names of the harness's loopback-mode tables in the root namespace (empty without nft or
/// without the right to list them).
pub(crate) fn list_root_tables() -> Vec<String> {
    if cmd::tool("nft").is_none() {
        return Vec::new();
    }
    run_tool("nft", &["list", "tables"], None)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("table inet "))
        .filter(|t| t.starts_with(ROOT_TABLE_PREFIX))
        .map(str::to_string)
        .collect()
}

/// The Net index of a loopback-mode table name `basalt_tc_I_N`.
pub(crate) fn table_index(name: &str) -> Option<u8> {
    let (index, n) = name.strip_prefix(ROOT_TABLE_PREFIX)?.split_once('_')?;
    n.parse::<u8>().ok()?;
    index.parse().ok()
}

fn root_table(host: &Host, index: u8) -> String {
    format!("{ROOT_TABLE_PREFIX}{index}_{}", host.ip.octets()[3])
}

impl Net {
    /// Drops all traffic, both directions, between `host` and each of `others` until
    /// [`heal`](Net::heal)`(host)`. Partitions add up.
    pub fn partition(&self, host: &Host, others: &[&Host]) -> Result<()> {
        self.check_member(host)?;
        let mut peers: Vec<Ipv4Addr> = Vec::new();
        for other in others {
            self.check_member(other)?;
            if other.name == host.name {
                bail!("cannot partition host {} from itself", host.name);
            }
            peers.push(other.ip);
        }
        match (&self.mode, &host.netns) {
            (Mode::Isolated { .. }, Some(ns)) => {
                let mut s = table_script(NETNS_TABLE, &["input", "output"]);
                for p in &peers {
                    s += &format!("add rule inet {NETNS_TABLE} input ip saddr {p} drop\n");
                    s += &format!("add rule inet {NETNS_TABLE} output ip daddr {p} drop\n");
                }
                nft(Some(ns), &s)
            }
            _ => {
                let table = self.recorded_root_table(host)?;
                let me = host.ip;
                let mut s = table_script(&table, &["output"]);
                for p in &peers {
                    s += &format!("add rule inet {table} output ip saddr {me} ip daddr {p} drop\n");
                    s += &format!("add rule inet {table} output ip saddr {p} ip daddr {me} drop\n");
                }
                nft(None, &s)
            }
        }
        .with_context(|| format!("partition host {}", host.name))
    }

    /// Cuts `host` from every other host and from the root namespace (only its own `lo`
    /// traffic passes) until [`heal`](Net::heal)`(host)`.
    pub fn partition_all(&self, host: &Host) -> Result<()> {
        self.check_member(host)?;
        match (&self.mode, &host.netns) {
            (Mode::Isolated { .. }, Some(ns)) => {
                let mut s = table_script(NETNS_TABLE, &["input", "output"]);
                s += &format!("add rule inet {NETNS_TABLE} input iifname != \"lo\" drop\n");
                s += &format!("add rule inet {NETNS_TABLE} output oifname != \"lo\" drop\n");
                nft(Some(ns), &s)
            }
            _ => {
                let table = self.recorded_root_table(host)?;
                let me = host.ip;
                let mut s = table_script(&table, &["output"]);
                s += &format!("add rule inet {table} output ip saddr {me} ip daddr {me} accept\n");
                s += &format!("add rule inet {table} output ip saddr {me} drop\n");
                s += &format!("add rule inet {table} output ip daddr {me} drop\n");
                nft(None, &s)
            }
        }
        .with_context(|| format!("partition host {} from all", host.name))
    }

    /// Removes the rules [`partition`](Net::partition) and
    /// [`partition_all`](Net::partition_all) put in place for `host` (not the rules other
    /// hosts' partitions hold against it: see [`heal_all`](Net::heal_all)).
    pub fn heal(&self, host: &Host) -> Result<()> {
        self.check_member(host)?;
        match (&self.mode, &host.netns) {
            (Mode::Isolated { .. }, Some(ns)) => delete_table(Some(ns), NETNS_TABLE),
            _ => delete_table(None, &root_table(host, self.registry.index())),
        }
        .with_context(|| format!("heal host {}", host.name))
    }

    /// Removes every partition of this Net.
    pub fn heal_all(&self) -> Result<()> {
        for host in self.hosts() {
            self.heal(&host)?;
        }
        Ok(())
    }

    /// Caps `host`'s bandwidth at `rate_kbit` kbit/s in each direction with `tc tbf` (on both
    /// ends of its veth). Namespace mode only.
    pub fn limit_bandwidth(&self, host: &Host, rate_kbit: u32) -> Result<()> {
        let (ns, veth) = self.veth_ends(host)?;
        if rate_kbit == 0 {
            bail!("rate_kbit must be positive");
        }
        // A burst of ~20 ms of traffic, but at least a few full-size packets.
        let burst_bytes = (rate_kbit as u64 * 1000 / 8 / 50).max(16 * 1024);
        let tbf = |prefix: &[&str], dev: &str| -> Result<()> {
            let rate = format!("{rate_kbit}kbit");
            let burst = burst_bytes.to_string();
            let latency = format!("{TBF_LATENCY_MS}ms");
            let mut args: Vec<&str> = prefix.to_vec();
            args.extend([
                "qdisc", "replace", "dev", dev, "root", "tbf", "rate", &rate, "burst", &burst,
                "latency", &latency,
            ]);
            run_tool("tc", &args, None).map(|_| ())
        };
        tbf(&["-n", &ns], "eth0")?;
        tbf(&[], &veth)
    }

    /// Removes a cap set by [`limit_bandwidth`](Net::limit_bandwidth); no cap is no error.
    pub fn clear_bandwidth_limit(&self, host: &Host) -> Result<()> {
        let (ns, veth) = self.veth_ends(host)?;
        // `tc qdisc del` fails when only the default qdisc is there: nothing to remove then.
        let _ = run_tool(
            "tc",
            &["-n", &ns, "qdisc", "del", "dev", "eth0", "root"],
            None,
        );
        let _ = run_tool("tc", &["qdisc", "del", "dev", &veth, "root"], None);
        Ok(())
    }

    /// The namespace of `host` and the root end of its veth pair.
    fn veth_ends(&self, host: &Host) -> Result<(String, String)> {
        self.check_member(host)?;
        match (&self.mode, &host.netns) {
            (Mode::Isolated { .. }, Some(ns)) => Ok((
                ns.clone(),
                format!("bt{}v{}", self.registry.index(), host.ip.octets()[3]),
            )),
            _ => bail!("bandwidth limits need network namespaces (this Net uses loopback)"),
        }
    }

    /// The loopback-mode table of `host`, recorded for cleanup before it is created.
    fn recorded_root_table(&self, host: &Host) -> Result<String> {
        if let Some(why) = crate::net::loopback_partition_obstacle() {
            bail!("partitions are unsupported in loopback mode: {why}");
        }
        let table = root_table(host, self.registry.index());
        self.registry.record(Resource::NftTable(table.clone()))?;
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: only the harness's loopback table names map back to a Net index.
    #[test]
    fn root_table_names_parse() {
        assert_eq!(table_index("basalt_tc_3_2"), Some(3));
        assert_eq!(table_index("basalt_tc_3"), None);
        assert_eq!(table_index("basalt_testcluster"), None);
        assert_eq!(table_index("filter"), None);
    }
}
