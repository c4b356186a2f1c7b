//! A Basalt cluster on a [`Net`]: etcd, hosts with `basalt osd` processes, a pool, and a
//! `basalt nbd` gateway, driven through Basalt's command line only. Used by the end-to-end
//! tests and by `basalt bench nbd --hosts N`.

use crate::cmd;
use crate::{Etcd, Host, Net, Proc, ProcessSpec};
use anyhow::{anyhow, bail, Context, Result};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// How long a daemon may take to print its banner.
pub const DAEMON_START: Duration = Duration::from_secs(60);
/// Bound on one CLI call.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(60);
/// WAL size of a test OSD's store: each WAL is allocated in full, and a test run has several
/// clusters of up to a dozen OSDs on one disk (the default, 256 MiB at 2 GiB, filled a
/// CI machine's disk).
pub const TEST_WAL_SIZE: &str = "32M";
/// First data-plane port on every host (metrics: + 1000).
pub const OSD_BASE_PORT: u16 = 6800;
/// NBD port of the gateway.
pub const NBD_PORT: u16 = 10809;

/// Shape of a cluster.
#[derive(Clone, Debug)]
pub struct Layout {
    pub hosts: usize,
    pub osds_per_host: usize,
    pub pgs: u32,
    /// Seconds a down OSD stays in before its data is re-replicated.
    pub out_after_secs: u64,
    pub osd_capacity: String,
    /// Where OSD stores go (default: the Net's directory), e.g. a tmpfs directory.
    pub data_root: Option<PathBuf>,
    /// Make the pool erasure coded: `(K+M, min_size, failure domain)`, e.g.
    /// `("2+1", 3, "host")` (default: 3 replicas, min_size 2, failure domain host).
    pub ec: Option<(String, u32, String)>,
    /// Data-plane TLS: `cluster init --data-tls` makes the credentials, and every daemon
    /// and CLI call gets them through `BASALT_DATA_TLS`.
    pub data_tls: bool,
    /// Extra arguments of every `basalt osd` (e.g. `--slow-op-ms 1000`).
    pub osd_args: Vec<String>,
    /// Extra arguments of the OSDs of host `i` (e.g. `--location rack=r1`), by host index.
    pub host_osd_args: Vec<Vec<String>>,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            hosts: 3,
            osds_per_host: 2,
            pgs: 32,
            out_after_secs: 600,
            osd_capacity: "2G".into(),
            data_root: None,
            ec: None,
            data_tls: false,
            osd_args: Vec::new(),
            host_osd_args: Vec::new(),
        }
    }
}

/// One OSD process.
pub struct OsdProc {
    pub id: u32,
    /// Index into [`BasaltCluster::hosts`].
    pub host: usize,
    /// Its data-plane port on its host.
    pub port: u16,
    pub proc: Proc,
    pub data: PathBuf,
}

/// A running cluster; everything is torn down when the Net drops.
pub struct BasaltCluster {
    pub layout: Layout,
    pub basalt: PathBuf,
    pub net: Net,
    pub etcd_host: Host,
    pub etcd: Etcd,
    /// `etcd://IP:2379/NAMESPACE`.
    pub meta_url: String,
    /// The admin keyring (`basalt cluster init`): every daemon and CLI call gets it through
    /// `BASALT_KEYRING`.
    pub keyring: PathBuf,
    /// The data-plane TLS directory (`BASALT_DATA_TLS`), with `Layout::data_tls`.
    pub data_tls: Option<PathBuf>,
    pub hosts: Vec<Host>,
    pub osds: Vec<OsdProc>,
    pub client_host: Host,
    pub gateway: Option<Proc>,
}

impl BasaltCluster {
    /// etcd, `layout.hosts` hosts with their OSDs, a pool `rbd` (3 replicas, min_size 2,
    /// failure domain host) and an NBD gateway on its own host; waits until every PG is clean.
    pub fn start(layout: Layout, basalt: impl Into<PathBuf>) -> Result<Self> {
        let net = Net::new().context("create the test network")?;
        let etcd_host = net.add_host("etcd")?;
        let etcd = net.start_etcd(&etcd_host).context("start etcd")?;
        let meta_url = format!("etcd://{}:2379/basalt-test", etcd_host.ip);
        let client_host = net.add_host("client")?;
        let keyring = net.dir().join("keyring");
        let data_tls = layout.data_tls.then(|| net.dir().join("data-tls"));
        let mut c = BasaltCluster {
            layout: layout.clone(),
            basalt: basalt.into(),
            net,
            etcd_host,
            etcd,
            meta_url,
            keyring,
            data_tls,
            hosts: Vec::new(),
            osds: Vec::new(),
            client_host,
            gateway: None,
        };
        let keyring = c.keyring.display().to_string();
        c.cli_ok(&["cluster", "init", "--keyring", &keyring])?;
        for _ in 0..layout.hosts {
            c.add_host_with_osds()?;
        }
        let pgs = layout.pgs.to_string();
        match &layout.ec {
            None => c.cli_ok(&[
                "pool",
                "create",
                "rbd",
                "--size",
                "3",
                "--min-size",
                "2",
                "--pgs",
                &pgs,
                "--failure-domain",
                "host",
            ])?,
            Some((code, min_size, domain)) => c.cli_ok(&[
                "pool",
                "create",
                "rbd",
                "--ec",
                code,
                "--min-size",
                &min_size.to_string(),
                "--pgs",
                &pgs,
                "--failure-domain",
                domain,
            ])?,
        };
        c.start_gateway()?;
        // A minute, and a second more per OSD: a large cluster on two cores peers slowly.
        let osds = (layout.hosts * layout.osds_per_host) as u64;
        c.wait_clean(Duration::from_secs(60 + osds))?;
        Ok(c)
    }

    /// Add a host and start its OSDs; returns the host's index.
    pub fn add_host_with_osds(&mut self) -> Result<usize> {
        let index = self.hosts.len();
        let host = self.net.add_host(&format!("host{}", index + 1))?;
        self.hosts.push(host);
        for k in 0..self.layout.osds_per_host {
            self.start_osd(index, OSD_BASE_PORT + k as u16)?;
        }
        Ok(index)
    }

    fn start_osd(&mut self, host: usize, port: u16) -> Result<()> {
        let h = &self.hosts[host];
        let id = self.osds.len() as u32;
        let root = self
            .layout
            .data_root
            .clone()
            .unwrap_or_else(|| self.net.dir().to_path_buf());
        let data = root.join(format!("osd{id}"));
        let spec = self
            .spec()
            .name(format!("osd{id}"))
            .env("RUST_LOG", "info,basalt_osd=debug")
            .args([
                "osd",
                "--meta",
                &self.meta_url,
                "--id",
                &id.to_string(),
                "--data",
                &data.display().to_string(),
                "--listen",
                &format!("{}:{port}", h.ip),
                // Reachable from the root namespace (the default is loopback).
                "--metrics-listen",
                &format!("{}:{}", h.ip, port + 1000),
                "--host",
                &h.name,
                "--capacity",
                &self.layout.osd_capacity,
                // Several test OSDs share one disk: their capacity is a ceiling, and their
                // WALs (allocated even when sparse) small.
                "--sparse",
                "--wal-size",
                TEST_WAL_SIZE,
                "--lease-ttl",
                "3",
                "--out-after",
                &self.layout.out_after_secs.to_string(),
                "--stray-scan-secs",
                "2",
            ])
            .args(self.layout.osd_args.iter().map(String::as_str))
            .args(self.layout.host_osd_args.get(host).into_iter().flatten());
        let proc = self.net.spawn(h, spec)?;
        proc.wait_for_line("serving on", DAEMON_START)
            .with_context(|| format!("osd.{id} did not start:\n{}", proc.log()))?;
        self.osds.push(OsdProc {
            id,
            host,
            port,
            proc,
            data,
        });
        Ok(())
    }

    fn start_gateway(&mut self) -> Result<()> {
        let spec = self.spec().name("nbd").args([
            "nbd",
            "--meta",
            &self.meta_url,
            "--listen",
            &format!("{}:{NBD_PORT}", self.client_host.ip),
            "--metrics-listen",
            &format!("{}:{}", self.client_host.ip, NBD_PORT + 1000),
        ]);
        let proc = self.net.spawn(&self.client_host, spec)?;
        proc.wait_for_line("NBD gateway serving", DAEMON_START)
            .with_context(|| format!("the NBD gateway did not start:\n{}", proc.log()))?;
        self.gateway = Some(proc);
        Ok(())
    }

    /// Another `basalt nbd` gateway on the client host, at NBD port `port` (its metrics at
    /// `port + 1000`), with `extra` arguments (e.g. `--io-timeout 3`); see [`Self::uri_at`].
    pub fn spawn_gateway(&self, port: u16, extra: &[&str]) -> Result<Proc> {
        self.spawn_gateway_on(&self.client_host, port, extra)
    }

    /// [`Self::spawn_gateway`] on `host` (a storage host: a hypervisor's gateway); see
    /// [`Self::uri_on`].
    pub fn spawn_gateway_on(&self, host: &Host, port: u16, extra: &[&str]) -> Result<Proc> {
        let mut args = vec![
            "nbd".to_string(),
            "--meta".into(),
            self.meta_url.clone(),
            "--listen".into(),
            format!("{}:{port}", host.ip),
            "--metrics-listen".into(),
            format!("{}:{}", host.ip, port + 1000),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let spec = self
            .spec()
            .name(format!("nbd-{}-{port}", host.name))
            .args(args);
        let proc = self.net.spawn(host, spec)?;
        proc.wait_for_line("NBD gateway serving", DAEMON_START)
            .with_context(|| format!("the NBD gateway did not start:\n{}", proc.log()))?;
        Ok(proc)
    }

    /// The NBD URI of a volume at a gateway of [`Self::spawn_gateway_on`] on `host`.
    pub fn uri_on(&self, host: &Host, port: u16, volume: &str) -> String {
        format!("nbd://{}:{port}/{volume}", host.ip)
    }

    /// The NBD URI of a volume at a gateway of [`Self::spawn_gateway`].
    pub fn uri_at(&self, port: u16, volume: &str) -> String {
        format!("nbd://{}:{port}/{volume}", self.client_host.ip)
    }

    /// A `basalt` process with the cluster's keyring (and data-plane TLS, when on).
    fn spec(&self) -> ProcessSpec {
        let spec = ProcessSpec::new(&self.basalt).env("BASALT_KEYRING", &self.keyring);
        match &self.data_tls {
            Some(dir) => spec.env("BASALT_DATA_TLS", dir),
            None => spec,
        }
    }

    /// The NBD URI of a volume.
    pub fn uri(&self, volume: &str) -> String {
        format!("nbd://{}:{NBD_PORT}/{volume}", self.client_host.ip)
    }

    /// Run `basalt ARGS` against the cluster from the root namespace (bounded).
    pub fn cli(&self, args: &[&str]) -> Result<Output> {
        let mut cmd = Command::new(&self.basalt);
        cmd.args(args)
            .env("BASALT_META", &self.meta_url)
            .env("BASALT_KEYRING", &self.keyring)
            .env("RUST_LOG", "warn");
        if let Some(dir) = &self.data_tls {
            cmd.env("BASALT_DATA_TLS", dir);
        }
        cmd::output(cmd, None, CLI_TIMEOUT)
    }

    /// `cli`, failing unless it succeeds; returns stdout.
    pub fn cli_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.cli(args)?;
        if !out.status.success() {
            bail!(
                "basalt {} failed ({}):\n{}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `basalt status --json` (no rate sampling).
    pub fn status(&self) -> Result<serde_json::Value> {
        let out = self.cli_ok(&["status", "--json", "--interval", "0"])?;
        serde_json::from_str(&out).with_context(|| format!("basalt status --json: {out}"))
    }

    /// The incarnation the current run of an OSD printed in its banner (None until it has).
    pub fn running_incarnation(&self, o: &OsdProc) -> Option<u64> {
        let log = o.proc.current_log();
        let line = log
            .lines()
            .rev()
            .find(|l| l.contains("serving on") && l.contains("incarnation "))?;
        let hex = line
            .split("incarnation ")
            .nth(1)?
            .split([',', ')'])
            .next()?;
        u64::from_str_radix(hex.trim(), 16).ok()
    }

    /// Wait until `ready(status)` holds, polling `basalt status --json` every 250 ms.
    pub fn wait_status(
        &self,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value> {
        let deadline = Instant::now() + timeout;
        let mut last = serde_json::Value::Null;
        // Bound: `timeout` of 250 ms rounds.
        while Instant::now() < deadline {
            if let Ok(st) = self.status() {
                if ready(&st) {
                    return Ok(st);
                }
                last = st;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Err(anyhow!(
            "{what}: not reached within {timeout:?}; last status:\n{}\n{}",
            serde_json::to_string_pretty(&last).unwrap_or_default(),
            self.logs_tail()
        ))
    }

    /// Wait until every running OSD is up in the map as its current run (so a restart was
    /// noticed) and every PG is active+clean.
    pub fn wait_clean(&self, timeout: Duration) -> Result<serde_json::Value> {
        self.wait_status("every PG active+clean", timeout, |st| {
            // Read at every poll: an OSD restarted just before this call may not have
            // printed its new incarnation yet (its log still ends with the old run's).
            let running: Vec<(u32, Option<u64>)> = self
                .osds
                .iter()
                .filter(|o| o.proc.is_running())
                .map(|o| (o.id, self.running_incarnation(o)))
                .collect();
            let total = st["pgs_total"].as_u64().unwrap_or(0);
            let clean = st["pgs_active_clean"].as_u64().unwrap_or(0);
            let osds = st["osds"].as_array().cloned().unwrap_or_default();
            let current = running.iter().all(|(id, inc)| {
                osds.iter().any(|o| {
                    o["id"].as_u64() == Some(*id as u64)
                        && o["up"].as_bool() == Some(true)
                        && inc.is_some()
                        && o["incarnation"].as_u64() == *inc
                })
            });
            total > 0 && clean == total && current
        })
    }

    /// The last lines of every daemon's log, for failure messages.
    pub fn logs_tail(&self) -> String {
        let mut out = String::new();
        let procs = self
            .osds
            .iter()
            .map(|o| (format!("osd.{}", o.id), &o.proc))
            .chain(self.gateway.iter().map(|g| ("nbd".to_string(), g)));
        for (name, p) in procs {
            let log = p.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(15)..];
            out.push_str(&format!("--- {name} ---\n{}\n", tail.join("\n")));
        }
        out
    }

    /// `basalt volume locate`: object, PG, acting set and primary of a byte of a volume.
    pub fn locate(&self, volume: &str, offset: u64) -> Result<serde_json::Value> {
        let out = self.cli_ok(&["volume", "locate", volume, &offset.to_string()])?;
        serde_json::from_str(&out).with_context(|| format!("basalt volume locate: {out}"))
    }

    /// The primary OSD of a byte of a volume.
    pub fn primary_of(&self, volume: &str, offset: u64) -> Result<u32> {
        let loc = self.locate(volume, offset)?;
        loc["primary"]
            .as_u64()
            .map(|p| p as u32)
            .ok_or_else(|| anyhow!("no primary for {volume}@{offset}: {loc}"))
    }

    /// The OSD process with id `id`.
    pub fn osd(&self, id: u32) -> &OsdProc {
        self.osds.iter().find(|o| o.id == id).expect("known OSD id")
    }

    /// GET /metrics of OSD `id` (data port + 1000) from the root namespace.
    pub fn osd_metrics(&self, id: u32) -> Result<String> {
        let o = self.osd(id);
        get_metrics(&format!("{}:{}", self.hosts[o.host].ip, o.port + 1000))
    }

    /// GET /metrics of the gateway of [`Self::spawn_gateway`] at NBD port `port`.
    pub fn gateway_metrics(&self, port: u16) -> Result<String> {
        get_metrics(&format!("{}:{}", self.client_host.ip, port + 1000))
    }
}

/// GET /metrics at `addr` from the root namespace: the whole HTTP response.
fn get_metrics(addr: &str) -> Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)
        .with_context(|| format!("connect to /metrics at {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}
