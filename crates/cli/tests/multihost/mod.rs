//! A multi-host Basalt cluster for end-to-end tests: etcd and every host in its own network
//! namespace (basalt-testcluster), real `basalt osd` / `basalt nbd` processes, and helpers
//! that drive the real CLI (`basalt pool/volume/status --meta`) and fio from the root
//! namespace.

#![allow(dead_code)]

use crate::common::{assert_ok, parse_json, require_tool, run, text};
use basalt_testcluster::BasaltCluster;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

#[allow(unused_imports)] // not every test binary that includes this module uses it
pub use basalt_testcluster::basalt::DAEMON_START;
pub use basalt_testcluster::Layout;

pub fn basalt_bin() -> &'static str {
    env!("CARGO_BIN_EXE_basalt")
}

/// The harness's Basalt cluster, with methods that panic (with the daemons' logs) instead of
/// returning errors, as tests want.
pub struct MultiHost(pub BasaltCluster);

impl std::ops::Deref for MultiHost {
    type Target = BasaltCluster;
    fn deref(&self) -> &BasaltCluster {
        &self.0
    }
}

fn or_panic<T>(r: anyhow::Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{e:#}"))
}

impl MultiHost {
    /// etcd, the hosts and their OSDs, pool `rbd`, an NBD gateway; every PG clean.
    pub fn start(layout: Layout) -> Self {
        Self(or_panic(BasaltCluster::start(layout, basalt_bin())))
    }

    pub fn add_host_with_osds(&mut self) -> usize {
        or_panic(self.0.add_host_with_osds())
    }

    pub fn cli_ok(&self, args: &[&str]) -> String {
        or_panic(self.0.cli_ok(args))
    }

    pub fn status(&self) -> serde_json::Value {
        or_panic(self.0.status())
    }

    pub fn wait_status(
        &self,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        or_panic(self.0.wait_status(what, timeout, ready))
    }

    /// `basalt osd out ID`, then wait (bounded) until the status shows it out.
    pub fn mark_out(&self, id: u32) {
        self.cli_ok(&["osd", "out", &id.to_string()]);
        self.wait_status("the OSD is out", Duration::from_secs(30), |st| {
            st["osds"].as_array().is_some_and(|osds| {
                osds.iter().any(|o| {
                    o["id"].as_u64() == Some(id as u64) && o["is_in"].as_bool() == Some(false)
                })
            })
        });
    }

    pub fn wait_clean(&self, timeout: Duration) -> serde_json::Value {
        or_panic(self.0.wait_clean(timeout))
    }

    pub fn locate(&self, volume: &str, offset: u64) -> serde_json::Value {
        or_panic(self.0.locate(volume, offset))
    }

    pub fn osd_metrics(&self, id: u32) -> String {
        or_panic(self.0.osd_metrics(id))
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

/// The fio job [`Loader`] runs on region `region` (of `region_mib` MiB): random 4 KiB
/// writes, each verified; add `--verify_only=1` to check a region written before.
pub fn region_job(region: u64, region_mib: u64) -> Vec<String> {
    [
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=8",
        &format!("--offset={}m", region * region_mib),
        &format!("--size={region_mib}m"),
        "--verify=crc32c",
        "--verify_fatal=1",
        "--do_verify=1",
        "--verify_backlog=64",
    ]
    .map(String::from)
    .to_vec()
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
                let job = region_job(region, region_mib);
                let job: Vec<&str> = job.iter().map(String::as_str).collect();
                let fio = Fio::new(&uri, &dir, &name, &job);
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
