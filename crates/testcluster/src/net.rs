//! The test network: hosts on a private bridge (or loopback addresses), the processes started
//! on them, and the removal of all of it on drop.

use crate::cmd;
use crate::host::Host;
use crate::netns;
use crate::process::{Proc, ProcessSpec, SIGNAL_WAIT};
use crate::registry::{self, lock, Registry, Resource};
use anyhow::{bail, Context, Result};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// First two octets of the namespace subnets: Net I owns 10.77.I.0/24.
const SUBNET: [u8; 2] = [10, 77];
/// First two octets of the loopback fallback: Net I uses 127.77.I.N.
const LOOPBACK: [u8; 2] = [127, 77];
/// Last octet of the first host (.1 is the root namespace's address on the bridge).
const FIRST_HOST: u8 = 2;
/// Last octet of the last host.
const LAST_HOST: u8 = 254;
/// Longest host name (the namespace is named `btI-NAME`).
const MAX_NAME_LEN: usize = 32;
/// Set to keep the temporary directory (logs, data) of a Net dropped while panicking.
const KEEP_ENV: &str = "BASALT_TESTCLUSTER_KEEP";

/// How hosts are separated.
pub(crate) enum Mode {
    /// One network namespace per host on a bridge; the root namespace is `root_ip` on it.
    Isolated { bridge: String, root_ip: Ipv4Addr },
    /// All hosts share the root namespace, each on its own 127.77.I.N address.
    Loopback,
}

/// An isolated test network on this machine. Dropping it (also while a test panics) kills
/// every process it started and removes every namespace, link, nftables table and temporary
/// file it made.
pub struct Net {
    pub(crate) registry: Arc<Registry>,
    pub(crate) mode: Mode,
    dir: PathBuf,
    hosts: Mutex<Vec<Host>>,
    procs: Mutex<Vec<Proc>>,
}

impl Net {
    /// A network of namespaces on a new bridge; falls back to loopback addresses (saying why
    /// on one stderr line) when namespaces cannot be made (not root, no `ip`, `ip netns add`
    /// fails). Removes leftovers of dead earlier runs first.
    pub fn new() -> Result<Net> {
        Self::create(true)
    }

    /// A network on loopback addresses 127.77.I.N in the root namespace, without trying
    /// namespaces (the fallback of [`Net::new`], forced).
    pub fn new_loopback() -> Result<Net> {
        Self::create(false)
    }

    fn create(isolate: bool) -> Result<Net> {
        let used = if cmd::tool("ip").is_some() {
            netns::root_addresses()
        } else {
            String::new()
        };
        let taken = |i: u8| {
            used.contains(&format!("{}.{}.{i}.", SUBNET[0], SUBNET[1]))
                || used.contains(&format!("{}.{}.{i}.", LOOPBACK[0], LOOPBACK[1]))
        };
        let registry = Arc::new(registry::allocate(taken)?);
        match setup(&registry, isolate) {
            Ok((dir, mode)) => Ok(Net {
                registry,
                mode,
                dir,
                hosts: Mutex::new(Vec::new()),
                procs: Mutex::new(Vec::new()),
            }),
            Err(e) => {
                // No Net to drop: undo what was recorded so far right here.
                registry.close(|_| false);
                Err(e)
            }
        }
    }

    /// Whether hosts are in their own network namespaces (false: loopback fallback).
    pub fn isolated(&self) -> bool {
        matches!(self.mode, Mode::Isolated { .. })
    }

    /// The root namespace's address on the bridge (how hosts reach code running in the test
    /// process itself), `None` in loopback mode.
    pub fn root_ip(&self) -> Option<Ipv4Addr> {
        match &self.mode {
            Mode::Isolated { root_ip, .. } => Some(*root_ip),
            Mode::Loopback => None,
        }
    }

    /// The bridge's name (`btIb`), `None` in loopback mode.
    pub fn bridge(&self) -> Option<&str> {
        match &self.mode {
            Mode::Isolated { bridge, .. } => Some(bridge),
            Mode::Loopback => None,
        }
    }

    /// The Net's temporary directory (process logs under `logs/`; put data directories here),
    /// removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The hosts added so far.
    pub fn hosts(&self) -> Vec<Host> {
        lock(&self.hosts).clone()
    }

    /// The processes started so far (restarts keep their handle).
    pub fn procs(&self) -> Vec<Proc> {
        lock(&self.procs).clone()
    }

    /// Adds a host: a namespace joined to the bridge with the next free address of the
    /// subnet (or the next loopback address). `name` is unique, `[A-Za-z0-9_-]`, at most 32.
    pub fn add_host(&self, name: &str) -> Result<Host> {
        let valid = !name.is_empty()
            && name.len() <= MAX_NAME_LEN
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            bail!("host name {name:?}: use 1 to {MAX_NAME_LEN} of [A-Za-z0-9_-]");
        }
        let mut hosts = lock(&self.hosts);
        if hosts.iter().any(|h| h.name == name) {
            bail!("host {name:?} already exists");
        }
        let n = FIRST_HOST as usize + hosts.len();
        if n > LAST_HOST as usize {
            bail!("a Net holds at most {} hosts", LAST_HOST - FIRST_HOST + 1);
        }
        let (n, index) = (n as u8, self.registry.index());
        let host = match &self.mode {
            Mode::Isolated { bridge, .. } => {
                let ns = format!("bt{index}-{name}");
                let veth = format!("bt{index}v{n}");
                let ip = Ipv4Addr::new(SUBNET[0], SUBNET[1], index, n);
                self.registry.record(Resource::Netns(ns.clone()))?;
                self.registry.record(Resource::Link(veth.clone()))?;
                netns::create_netns(&ns)?;
                netns::connect_host(&ns, &veth, &format!("bt{index}p{n}"), bridge, ip)
                    .with_context(|| format!("connect host {name} to {bridge}"))?;
                Host {
                    name: name.to_string(),
                    ip,
                    netns: Some(ns),
                }
            }
            Mode::Loopback => Host {
                name: name.to_string(),
                ip: Ipv4Addr::new(LOOPBACK[0], LOOPBACK[1], index, n),
                netns: None,
            },
        };
        hosts.push(host.clone());
        Ok(host)
    }

    /// Starts `spec` on `host` (inside its namespace), output appended to
    /// `dir()/logs/HOST-NAME-SEQ.log`. It runs until killed or until the Net is dropped.
    pub fn spawn(&self, host: &Host, spec: ProcessSpec) -> Result<Proc> {
        let mut procs = lock(&self.procs);
        let log = self.dir.join("logs").join(format!(
            "{}-{}-{}.log",
            host.name,
            spec.display_name().replace('/', "_"),
            procs.len()
        ));
        let proc = Proc::spawn(host, spec, log, self.registry.clone())?;
        procs.push(proc.clone());
        Ok(proc)
    }

    /// Runs a short command on `host` to completion and returns its output (status not
    /// checked); it is killed if it runs longer than `timeout`.
    pub fn run(&self, host: &Host, spec: ProcessSpec, timeout: Duration) -> Result<Output> {
        cmd::output(spec.command(host)?, None, timeout)
    }
}

impl Net {
    /// Fails unless `host` was added to this Net.
    pub(crate) fn check_member(&self, host: &Host) -> Result<()> {
        if lock(&self.hosts).iter().any(|h| h == host) {
            Ok(())
        } else {
            bail!("host {} does not belong to this Net", host.name)
        }
    }
}

/// Creates the Net's temporary directory and, if `isolate`, its bridge.
fn setup(registry: &Registry, isolate: bool) -> Result<(PathBuf, Mode)> {
    let dir = tempfile::Builder::new()
        .prefix(&format!("basalt-testcluster-{}-", registry.index()))
        .tempdir()
        .context("create the Net's temporary directory")?
        .keep();
    registry.record(Resource::Dir(dir.clone()))?;
    std::fs::create_dir_all(dir.join("logs"))?;
    if !isolate {
        return Ok((dir, Mode::Loopback));
    }
    let mode = match isolated_mode(registry) {
        Ok(mode) => mode,
        Err(why) => {
            // One line per test process, not one per Net.
            static NOTICE: std::sync::Once = std::sync::Once::new();
            NOTICE.call_once(|| eprintln!("{}", fallback_notice(&format!("{why:#}"))));
            Mode::Loopback
        }
    };
    Ok((dir, mode))
}

/// Sets up namespace mode: probes that a namespace can be made, then creates the bridge.
fn isolated_mode(registry: &Registry) -> Result<Mode> {
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("not running as root");
    }
    cmd::tool("ip").context("`ip` (iproute2) not found")?;
    let index = registry.index();
    let probe = format!("bt{index}-probe");
    registry.record(Resource::Netns(probe.clone()))?;
    netns::create_netns(&probe)?;
    netns::delete_netns(&probe)?;
    let bridge = format!("bt{index}b");
    let root_ip = Ipv4Addr::new(SUBNET[0], SUBNET[1], index, 1);
    registry.record(Resource::Link(bridge.clone()))?;
    if let Err(e) = netns::create_bridge(&bridge, root_ip) {
        let _ = netns::delete_link(&bridge);
        return Err(e);
    }
    Ok(Mode::Isolated { bridge, root_ip })
}

/// Why loopback-mode partitions cannot work here (they need nftables in the root namespace,
/// hence root), or `None` if they can.
pub(crate) fn loopback_partition_obstacle() -> Option<&'static str> {
    if cmd::tool("nft").is_none() {
        return Some("`nft` not found (Debian package nftables)");
    }
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("nftables rules need root");
    }
    None
}

/// The one line printed when [`Net::new`] falls back to loopback addresses.
fn fallback_notice(why: &str) -> String {
    let partitions = match loopback_partition_obstacle() {
        None => "partitions are emulated with nftables rules on those addresses in the root \
                 namespace and only cut traffic whose source or destination is a host's address \
                 (outgoing connections come from 127.0.0.1 unless a process binds its host \
                 address)"
            .to_string(),
        Some(obstacle) => format!("partitions are unsupported ({obstacle}): partition() fails"),
    };
    format!(
        "basalt-testcluster: network namespaces unavailable ({}); hosts use loopback addresses \
         {}.{}.I.N (I: one per Net), and {partitions}",
        why.replace('\n', " "),
        LOOPBACK[0],
        LOOPBACK[1]
    )
}

impl Drop for Net {
    fn drop(&mut self) {
        let procs = std::mem::take(&mut *lock(&self.procs));
        // Kill everything first, then wait: the waits overlap.
        for p in &procs {
            p.kill_now();
        }
        let deadline = Instant::now() + SIGNAL_WAIT;
        for p in &procs {
            let left = deadline.saturating_duration_since(Instant::now());
            if p.wait(left).is_err() {
                eprintln!("basalt-testcluster: {p:?} survived SIGKILL");
            }
        }
        let keep_dir = std::thread::panicking() && std::env::var_os(KEEP_ENV).is_some();
        if keep_dir {
            eprintln!(
                "basalt-testcluster: test panicked; kept {} ({KEEP_ENV} is set)",
                self.dir.display()
            );
        } else if std::thread::panicking() {
            for p in &procs {
                eprintln!(
                    "basalt-testcluster: test panicked; last lines of {p:?} (set {KEEP_ENV}=1 to keep {}):\n{}",
                    self.dir.display(),
                    p.log_tail()
                );
            }
        }
        self.registry
            .close(|r| keep_dir && matches!(r, Resource::Dir(_)));
    }
}
