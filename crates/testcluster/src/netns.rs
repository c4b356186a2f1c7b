//! iproute2 plumbing: the bridge, the namespaces and the veth pairs that join them, and their
//! removal. Names: bridge `btIb`, root end of host N's veth `btIvN` (its peer is created as
//! `btIpN`, then moved into the namespace and renamed `eth0`), namespace `btI-NAME`, where I
//! is the Net's index.

use crate::cmd::run_tool;
use anyhow::{bail, Result};
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

/// Longest wait for a namespace's processes to die, or for a new veth to come up.
const SETTLE_WAIT: Duration = Duration::from_secs(5);

/// Creates the bridge with the root namespace's address on it, and brings it up.
pub(crate) fn create_bridge(name: &str, root_ip: Ipv4Addr) -> Result<()> {
    run_tool("ip", &["link", "add", name, "type", "bridge"], None)?;
    run_tool(
        "ip",
        &["addr", "add", &format!("{root_ip}/24"), "dev", name],
        None,
    )?;
    run_tool("ip", &["link", "set", name, "up"], None)?;
    Ok(())
}

/// Creates an empty network namespace.
pub(crate) fn create_netns(name: &str) -> Result<()> {
    run_tool("ip", &["netns", "add", name], None)?;
    Ok(())
}

/// Joins namespace `ns` to `bridge` with the veth pair `veth`/`peer` (the peer becomes `eth0`
/// with address `ip`/24 inside `ns`), brings `lo` and both ends up, and waits for the link.
pub(crate) fn connect_host(
    ns: &str,
    veth: &str,
    peer: &str,
    bridge: &str,
    ip: Ipv4Addr,
) -> Result<()> {
    let addr = format!("{ip}/24");
    let steps: [&[&str]; 8] = [
        &["link", "add", veth, "type", "veth", "peer", "name", peer],
        &["link", "set", peer, "netns", ns],
        &["-n", ns, "link", "set", peer, "name", "eth0"],
        &["-n", ns, "addr", "add", &addr, "dev", "eth0"],
        &["-n", ns, "link", "set", "lo", "up"],
        &["-n", ns, "link", "set", "eth0", "up"],
        &["link", "set", veth, "master", bridge],
        &["link", "set", veth, "up"],
    ];
    for args in steps {
        run_tool("ip", args, None)?;
    }
    let operstate = Path::new("/sys/class/net").join(veth).join("operstate");
    let deadline = Instant::now() + SETTLE_WAIT;
    // Loop bound: SETTLE_WAIT.
    while std::fs::read_to_string(&operstate)
        .unwrap_or_default()
        .trim()
        != "up"
    {
        if Instant::now() >= deadline {
            bail!("{veth} did not come up within {SETTLE_WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Pids of the processes inside namespace `ns` (`ip netns pids`).
pub(crate) fn netns_pids(ns: &str) -> Vec<i32> {
    run_tool("ip", &["netns", "pids", ns], None)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// SIGKILLs every process inside `ns`, waits (bounded) until none is left, and deletes the
/// namespace, which also destroys the veth end inside it. A missing namespace is no error.
pub(crate) fn delete_netns(ns: &str) -> Result<()> {
    if !Path::new("/run/netns").join(ns).exists() {
        return Ok(());
    }
    let deadline = Instant::now() + SETTLE_WAIT;
    // Loop bound: SETTLE_WAIT.
    loop {
        let pids = netns_pids(ns);
        if pids.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            bail!("processes {pids:?} in namespace {ns} survived SIGKILL for {SETTLE_WAIT:?}");
        }
        for pid in pids {
            // SAFETY: kill(2) on a process inside a namespace this harness created.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    run_tool("ip", &["netns", "delete", ns], None)?;
    Ok(())
}

/// Deletes a link of the root namespace (a veth takes its peer with it). A missing link is
/// no error.
pub(crate) fn delete_link(name: &str) -> Result<()> {
    if !Path::new("/sys/class/net").join(name).exists() {
        return Ok(());
    }
    run_tool("ip", &["link", "delete", name], None)?;
    Ok(())
}

/// Names of the named network namespaces.
pub(crate) fn list_netns() -> Vec<String> {
    list_dir("/run/netns")
}

/// Names of the links in the root namespace.
pub(crate) fn list_links() -> Vec<String> {
    list_dir("/sys/class/net")
}

fn list_dir(dir: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The Net index of a harness namespace name `btI-NAME`.
pub(crate) fn netns_index(name: &str) -> Option<u8> {
    let (index, _) = name.strip_prefix("bt")?.split_once('-')?;
    parse_index(index)
}

/// The Net index of a harness link name `btIb`, `btIvN` or `btIpN`.
pub(crate) fn link_index(name: &str) -> Option<u8> {
    let rest = name.strip_prefix("bt")?;
    let digits = rest.find(|c: char| !c.is_ascii_digit())?;
    let (index, tail) = rest.split_at(digits);
    let mut tail = tail.chars();
    let kind = tail.next()?;
    let n: String = tail.collect();
    let valid = match kind {
        'b' => n.is_empty(),
        'v' | 'p' => !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()),
        _ => false,
    };
    if valid {
        parse_index(index)
    } else {
        None
    }
}

fn parse_index(digits: &str) -> Option<u8> {
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The IPv4 addresses and routes of the root namespace, as `ip` prints them (to avoid
/// subnets the machine already uses).
pub(crate) fn root_addresses() -> String {
    let addrs = run_tool("ip", &["-4", "-o", "addr", "show"], None).unwrap_or_default();
    let routes = run_tool("ip", &["-4", "route", "show", "table", "all"], None).unwrap_or_default();
    addrs + &routes
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: only names of the harness's own scheme are recognised as its leftovers.
    #[test]
    fn harness_names_are_recognised_strictly() {
        assert_eq!(link_index("bt3b"), Some(3));
        assert_eq!(link_index("bt12v2"), Some(12));
        assert_eq!(link_index("bt250p253"), Some(250));
        assert_eq!(link_index("bt3bx"), None);
        assert_eq!(link_index("bt3v"), None);
        assert_eq!(link_index("btv2"), None);
        assert_eq!(link_index("bt999b"), None);
        assert_eq!(link_index("bthost"), None);
        assert_eq!(link_index("eth0"), None);
        assert_eq!(netns_index("bt7-host1"), Some(7));
        assert_eq!(netns_index("bt-host1"), None);
        assert_eq!(netns_index("btx-host1"), None);
        assert_eq!(netns_index("other"), None);
    }
}
