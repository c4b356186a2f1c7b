//! A multi-host Basalt cluster for end-to-end tests: etcd and every host in its own network
//! namespace (basalt-testcluster), real `basalt osd` / `basalt nbd` processes, and helpers
//! that drive the real CLI (`basalt pool/volume/status --meta`) and fio from the root
//! namespace.

#![allow(dead_code)]

use crate::common::{assert_ok, parse_json, require_tool, run, text};
use basalt_testcluster::{Etcd, Host, Net, Proc, ProcessSpec};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// How long a daemon may take to print its banner.
pub const DAEMON_START: Duration = Duration::from_secs(60);
/// Bound on one CLI call.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(60);
/// First data-plane port on every host.
const OSD_BASE_PORT: u16 = 6800;
/// NBD port of the gateway.
pub const NBD_PORT: u16 = 10809;

/// One OSD process of the cluster.
pub struct OsdProc {
    pub id: u32,
    pub host: usize,
    pub proc: Proc,
    pub data: PathBuf,
}

/// Settings of a test cluster.
#[derive(Clone, Debug)]
pub struct Layout {
    pub hosts: usize,
    pub osds_per_host: usize,
    pub pgs: u32,
    /// Seconds a down OSD stays in before its data is re-replicated.
    pub out_after_secs: u64,
    pub osd_capacity: String,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            hosts: 3,
            osds_per_host: 2,
            pgs: 32,
            out_after_secs: 600,
            osd_capacity: "2G".into(),
        }
    }
}

/// A running multi-host cluster; everything is torn down on drop (by the Net).
pub struct MultiHost {
    pub layout: Layout,
    pub net: Net,
    pub etcd_host: Host,
    pub etcd: Etcd,
    pub meta_url: String,
    pub hosts: Vec<Host>,
    pub osds: Vec<OsdProc>,
    pub client_host: Host,
    pub gateway: Option<Proc>,
}

pub fn basalt_bin() -> &'static str {
    env!("CARGO_BIN_EXE_basalt")
}

impl MultiHost {
    /// etcd, `layout.hosts` hosts with their OSDs, a pool `rbd` (3 replicas, min_size 2,
    /// failure domain host) and an NBD gateway on its own host; waits until every PG is clean.
    pub fn start(layout: Layout) -> Self {
        let net = Net::new().expect("create the test network");
        let etcd_host = net.add_host("etcd").expect("add the etcd host");
        let etcd = net.start_etcd(&etcd_host).expect("start etcd");
        let meta_url = format!("etcd://{}:2379/basalt-test", etcd_host.ip);
        let client_host = net.add_host("client").expect("add the client host");
        let mut mh = MultiHost {
            layout: layout.clone(),
            net,
            etcd_host,
            etcd,
            meta_url,
            hosts: Vec::new(),
            osds: Vec::new(),
            client_host,
            gateway: None,
        };
        for _ in 0..layout.hosts {
            mh.add_host_with_osds();
        }
        mh.cli_ok(&[
            "pool",
            "create",
            "rbd",
            "--size",
            "3",
            "--min-size",
            "2",
            "--pgs",
            &layout.pgs.to_string(),
            "--failure-domain",
            "host",
        ]);
        mh.start_gateway();
        mh.wait_clean(Duration::from_secs(60));
        mh
    }

    /// Add a host and start its OSDs; returns the host index.
    pub fn add_host_with_osds(&mut self) -> usize {
        let index = self.hosts.len();
        let host = self
            .net
            .add_host(&format!("host{}", index + 1))
            .expect("add a host");
        self.hosts.push(host);
        for k in 0..self.layout.osds_per_host {
            self.start_osd(index, k);
        }
        index
    }

    fn start_osd(&mut self, host: usize, k: usize) {
        let h = &self.hosts[host];
        let id = self.osds.len() as u32;
        let data = self.net.dir().join(format!("osd{id}"));
        let spec = ProcessSpec::new(basalt_bin())
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
                &format!("{}:{}", h.ip, OSD_BASE_PORT + k as u16),
                "--host",
                &h.name,
                "--capacity",
                &self.layout.osd_capacity,
                "--lease-ttl",
                "3",
                "--out-after",
                &self.layout.out_after_secs.to_string(),
            ]);
        let proc = self.net.spawn(h, spec).expect("spawn an OSD");
        proc.wait_for_line("serving on", DAEMON_START)
            .unwrap_or_else(|e| panic!("osd.{id} did not start: {e}\n{}", proc.log()));
        self.osds.push(OsdProc {
            id,
            host,
            proc,
            data,
        });
    }

    fn start_gateway(&mut self) {
        let spec = ProcessSpec::new(basalt_bin()).name("nbd").args([
            "nbd",
            "--meta",
            &self.meta_url,
            "--listen",
            &format!("{}:{NBD_PORT}", self.client_host.ip),
        ]);
        let proc = self
            .net
            .spawn(&self.client_host, spec)
            .expect("spawn the gateway");
        proc.wait_for_line("NBD gateway serving", DAEMON_START)
            .unwrap_or_else(|e| panic!("the NBD gateway did not start: {e}\n{}", proc.log()));
        self.gateway = Some(proc);
    }

    /// The NBD URI of a volume.
    pub fn uri(&self, volume: &str) -> String {
        format!("nbd://{}:{NBD_PORT}/{volume}", self.client_host.ip)
    }

    /// Run `basalt ARGS --meta URL` from the root namespace.
    pub fn cli(&self, args: &[&str]) -> Output {
        run(
            Command::new(basalt_bin())
                .args(args)
                .env("BASALT_META", &self.meta_url)
                .env("RUST_LOG", "warn"),
            CLI_TIMEOUT,
        )
    }

    /// `cli`, asserting success; returns stdout.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert_ok(&out, &format!("basalt {}", args.join(" ")));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `basalt status --json`.
    pub fn status(&self) -> serde_json::Value {
        parse_json(
            self.cli_ok(&["status", "--json", "--interval", "0"])
                .as_bytes(),
            "basalt status --json",
        )
    }

    /// The incarnation the current run of an OSD printed in its banner.
    pub fn running_incarnation(&self, o: &OsdProc) -> Option<u64> {
        let log = o.proc.log();
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

    /// Wait until `ready(status)` holds, polling `basalt status --json`.
    pub fn wait_status(
        &self,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        let mut last = serde_json::Value::Null;
        // Bound: `timeout` of 250 ms rounds.
        while Instant::now() < deadline {
            let out = self.cli(&["status", "--json", "--interval", "0"]);
            if out.status.success() {
                last = parse_json(&out.stdout, "basalt status --json");
                if ready(&last) {
                    return last;
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!(
            "{what}: not reached within {timeout:?}; last status:\n{}\n{}",
            serde_json::to_string_pretty(&last).unwrap_or_default(),
            self.logs_tail()
        );
    }

    /// Wait until every running OSD is up in the map as its current run (so a restart was
    /// noticed) and every PG is active+clean.
    pub fn wait_clean(&self, timeout: Duration) -> serde_json::Value {
        let running: Vec<(u32, Option<u64>)> = self
            .osds
            .iter()
            .filter(|o| o.proc.is_running())
            .map(|o| (o.id, self.running_incarnation(o)))
            .collect();
        self.wait_status("every PG active+clean", timeout, |st| {
            let total = st["pgs_total"].as_u64().unwrap_or(0);
            let clean = st["pgs_active_clean"].as_u64().unwrap_or(0);
            let osds = st["osds"].as_array().cloned().unwrap_or_default();
            let current = running.iter().all(|(id, inc)| {
                osds.iter().any(|o| {
                    o["id"].as_u64() == Some(*id as u64)
                        && o["up"].as_bool() == Some(true)
                        && (inc.is_none() || o["incarnation"].as_u64() == *inc)
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

    /// `basalt volume locate` of a byte of a volume.
    pub fn locate(&self, volume: &str, offset: u64) -> serde_json::Value {
        let out = self.cli_ok(&["volume", "locate", volume, &offset.to_string()]);
        parse_json(out.as_bytes(), "basalt volume locate")
    }

    /// GET http://HOST_IP:PORT/metrics of OSD `id` (data port + 1000), from the root
    /// namespace.
    pub fn osd_metrics(&self, id: u32) -> String {
        use std::io::{Read, Write};
        let o = self.osd(id);
        let k = self
            .osds
            .iter()
            .filter(|x| x.host == o.host && x.id < id)
            .count() as u16;
        let addr = format!("{}:{}", self.hosts[o.host].ip, OSD_BASE_PORT + k + 1000);
        let mut s = std::net::TcpStream::connect(&addr).expect("connect to /metrics");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read /metrics");
        out
    }

    /// The OSD process with id `id`.
    pub fn osd(&self, id: u32) -> &OsdProc {
        self.osds.iter().find(|o| o.id == id).expect("known OSD id")
    }
}

/// A fio job over NBD, run from the root namespace.
pub struct Fio {
    pub args: Vec<String>,
    pub json_path: PathBuf,
}

impl Fio {
    /// fio on `uri` with `extra` job options; JSON output into `dir`.
    pub fn new(uri: &str, dir: &std::path::Path, name: &str, extra: &[&str]) -> Self {
        let json_path = dir.join(format!("{name}.json"));
        let mut args: Vec<String> = vec![
            format!("--name={name}"),
            "--ioengine=nbd".into(),
            format!("--uri={uri}"),
            "--verify_state_save=0".into(),
            "--output-format=json".into(),
            format!("--output={}", json_path.display()),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self { args, json_path }
    }

    /// Start fio in the background.
    pub fn spawn(&self) -> std::process::Child {
        let fio = require_tool("fio", "fio");
        Command::new(fio)
            .args(&self.args)
            .current_dir(self.json_path.parent().expect("json path has a parent"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn fio")
    }

    /// Run fio to completion within `timeout` and assert a clean, verified run.
    pub fn run_ok(&self, timeout: Duration) -> serde_json::Value {
        let fio = require_tool("fio", "fio");
        let out = run(
            Command::new(fio)
                .args(&self.args)
                .current_dir(self.json_path.parent().expect("json path has a parent")),
            timeout,
        );
        self.check(&out)
    }

    /// Check a finished fio run: exit 0, no verify errors, job error 0.
    pub fn check(&self, out: &Output) -> serde_json::Value {
        let json = std::fs::read(&self.json_path).unwrap_or_default();
        assert_ok(
            out,
            &format!(
                "fio {}\n--- json ---\n{}",
                self.args.join(" "),
                String::from_utf8_lossy(&json)
            ),
        );
        let all = text(out);
        assert!(
            !all.contains("verify: bad")
                && !all.contains("verify failed")
                && !all.contains("bad magic"),
            "fio reported verify problems:\n{all}"
        );
        let v = parse_json(&json, "fio --output-format=json");
        assert_eq!(
            v["jobs"][0]["error"].as_i64(),
            Some(0),
            "fio job error: {}",
            v["jobs"][0]
        );
        v
    }
}

/// Wait for a spawned fio to finish within `timeout` (killed after it) and return its output.
pub fn wait_child(mut child: std::process::Child, timeout: Duration) -> Output {
    let deadline = Instant::now() + timeout;
    // Bound: `timeout` of 100 ms rounds.
    loop {
        match child.try_wait().expect("poll fio") {
            Some(_) => return child.wait_with_output().expect("collect fio output"),
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("collect fio output");
                panic!("fio did not finish within {timeout:?}:\n{}", text(&out));
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// A background load: fio jobs in a loop, each writing one region of a volume with crc32c
/// verify headers and verifying while it writes (verify_backlog) and at its end; runs until
/// stopped. Every job must succeed: an error reaching fio is a failure of the scenario.
pub struct Loader {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<usize, String>>>,
    /// Regions (MiB) the jobs cover: [0, regions * region_mib).
    pub regions: u64,
    pub region_mib: u64,
}

impl Loader {
    pub fn start(uri: String, dir: PathBuf, regions: u64, region_mib: u64) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut done = 0usize;
            // Bound: runs until stopped; each job is bounded by run()'s timeout.
            while !flag.load(std::sync::atomic::Ordering::SeqCst) || done < regions as usize {
                let region = done as u64 % regions;
                let name = format!("load{done}");
                let offset = format!("--offset={}m", region * region_mib);
                let size = format!("--size={region_mib}m");
                let fio = Fio::new(
                    &uri,
                    &dir,
                    &name,
                    &[
                        "--rw=randwrite",
                        "--bs=4k",
                        "--iodepth=8",
                        &offset,
                        &size,
                        "--verify=crc32c",
                        "--verify_fatal=1",
                        "--do_verify=1",
                        "--verify_backlog=64",
                    ],
                );
                let bin = require_tool("fio", "fio");
                let out = run(
                    Command::new(bin).args(&fio.args).current_dir(&dir),
                    Duration::from_secs(300),
                );
                let all = text(&out);
                if !out.status.success() || all.contains("verify") && all.contains("bad") {
                    return Err(format!("fio job {name} failed:\n{all}"));
                }
                done += 1;
            }
            Ok(done)
        });
        Self {
            stop,
            thread: Some(thread),
            regions,
            region_mib,
        }
    }

    /// Stop after the current job (and after every region was written once); returns the
    /// number of jobs run. Panics when one failed.
    pub fn finish(mut self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let t = self.thread.take().expect("loader thread");
        match t.join().expect("loader thread panicked") {
            Ok(n) => n,
            Err(e) => panic!("{e}"),
        }
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
