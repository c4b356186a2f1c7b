//! `basalt bench nbd`: fio against a Basalt volume and against qemu-nbd, interleaved.
//!
//! Both targets serve from tmpfs so the comparison measures software cost, not the (noisy)
//! virtual disk. Rounds alternate Basalt and qemu-nbd profile by profile, so drift in the
//! machine's speed affects both alike; the table reports medians and the ratio. With
//! `hosts > 0` a multi-host cluster in network namespaces is measured too ([`multihost`]),
//! and its failover pause.
//!
//! [`multihost`]: crate::multihost

use crate::cluster::{Cluster, ClusterConfig};
use crate::fio::{self, Job, Span, Target};
use crate::results::FioSummary;
use crate::suite::RemoveOnDrop;
use crate::{environment, multihost};
use anyhow::{bail, Context};
use basalt_proto::size::format_size;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What `basalt bench nbd` measures, and where.
#[derive(Clone, Debug)]
pub struct NbdOptions {
    /// Rounds; each runs every profile once on each target.
    pub rounds: u32,
    /// Measured seconds per fio run (after 1 s of warm-up).
    pub runtime_s: u32,
    /// Size of the test volume and of qemu-nbd's file.
    pub size_bytes: u64,
    /// Directory on tmpfs for the stores and the file (a private directory is made in it).
    pub scratch: PathBuf,
    /// Hosts of a multi-host cluster also measured (0: none).
    pub hosts: usize,
    /// Failover measurements on the multi-host cluster.
    pub failovers: usize,
}

/// Warm-up seconds of every timed run, not measured.
const RAMP_S: u32 = 1;
/// How long qemu-nbd may take to listen.
const QEMU_NBD_START: Duration = Duration::from_secs(20);

/// One fio workload of the table.
struct Profile {
    name: &'static str,
    job: Job,
}

/// A profile running `rw` in blocks of `bs` at queue depth `iodepth`, one job.
const fn profile(name: &'static str, rw: &'static str, bs: &'static str, iodepth: u32) -> Profile {
    Profile {
        name,
        job: Job {
            rw,
            bs,
            iodepth,
            numjobs: 1,
            rwmixread: None,
        },
    }
}

const PROFILES: &[Profile] = &[
    profile("4k randread QD1", "randread", "4k", 1),
    profile("4k randread QD32", "randread", "4k", 32),
    profile("4k randwrite QD1", "randwrite", "4k", 1),
    profile("4k randwrite QD32", "randwrite", "4k", 32),
    profile("1M seq read QD8", "read", "1M", 8),
    profile("1M seq write QD8", "write", "1M", 8),
];

/// What one fio run measured, in the direction it ran.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    iops: f64,
    mib_s: f64,
    lat_us_mean: f64,
}

impl Sample {
    fn of(summary: &FioSummary, read: bool) -> Sample {
        if read {
            Sample {
                iops: summary.read_iops,
                mib_s: summary.read_mib_s,
                lat_us_mean: summary.read_lat_mean_us,
            }
        } else {
            Sample {
                iops: summary.write_iops,
                mib_s: summary.write_mib_s,
                lat_us_mean: summary.write_lat_mean_us,
            }
        }
    }
}

/// A child process killed when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn need(tool: &str, package: &str) -> anyhow::Result<()> {
    if environment::which(tool).is_none() {
        bail!("{tool} is not installed; install it with: apt-get install -y {package}");
    }
    Ok(())
}

/// Start qemu-nbd on a raw tmpfs file and return it with its NBD URI.
fn start_qemu_nbd(file: &Path, size_bytes: u64) -> anyhow::Result<(Guard, String)> {
    std::fs::File::create(file)?.set_len(size_bytes)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = Command::new("qemu-nbd")
        .args(["-f", "raw", "-x", "bench", "-b", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(["--shared=8", "--persistent"])
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start qemu-nbd")?;
    let guard = Guard(child);
    let deadline = Instant::now() + QEMU_NBD_START;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("qemu-nbd did not start listening on port {port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((guard, format!("nbd://127.0.0.1:{port}/bench")))
}

/// Run `job` on the NBD export `uri` for `span` (bounded), its files in `dir`.
fn run_fio(
    uri: &str,
    job: &Job,
    span: Span,
    size_bytes: u64,
    dir: &Path,
) -> anyhow::Result<FioSummary> {
    let output = dir.join("fio.json");
    let target = Target::Nbd { uri: uri.into() };
    let args = fio::args(job, &target, size_bytes, span, &output);
    let bound = match span {
        Span::Timed { runtime_s, ramp_s } => fio::timed_bound(runtime_s, ramp_s),
        Span::Once => fio::fill_bound(size_bytes),
    };
    fio::run(&args, &output, &dir.join("fio.stderr"), bound)
}

/// The middle value (the upper one of an even count); 0 for none.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

/// Run the comparison; returns its table (Markdown). Progress goes to stderr.
pub fn run(opts: &NbdOptions) -> anyhow::Result<String> {
    need("fio", "fio")?;
    need("qemu-nbd", "qemu-utils")?;
    let scratch = opts
        .scratch
        .join(format!("basalt-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("create {}", scratch.display()))?;
    // Declared first, so dropped last: after every daemon using the directory stopped.
    let _cleanup = RemoveOnDrop(scratch.clone());
    let config = ClusterConfig {
        osds: 3,
        replicas: 3,
        pgs: 32,
        object_size: "128K".into(),
        osd_size: "4G".into(),
        volume_size: format_size(opts.size_bytes),
        s3: false,
    };
    let basalt = Cluster::start(
        &scratch.join("basalt"),
        &scratch.join("basalt.log"),
        &config,
    )?;
    let (_qemu, qemu_uri) = start_qemu_nbd(&scratch.join("qemu.raw"), opts.size_bytes)?;
    let mut targets: Vec<(String, String)> = vec![
        ("basalt".into(), basalt.uri.clone()),
        ("qemu-nbd".into(), qemu_uri),
    ];
    let cluster = if opts.hosts > 0 {
        eprintln!(
            "starting a {}-host cluster in network namespaces",
            opts.hosts
        );
        let (cluster, uri) =
            multihost::start(opts.hosts, &scratch.join("cluster"), opts.size_bytes)?;
        targets.insert(1, (format!("basalt {}-host", opts.hosts), uri));
        Some(cluster)
    } else {
        None
    };

    eprintln!(
        "preconditioning: writing {} to each target",
        format_size(opts.size_bytes)
    );
    for (name, uri) in &targets {
        run_fio(uri, &fio::FILL, Span::Once, opts.size_bytes, &scratch)
            .with_context(|| format!("precondition {name}"))?;
    }
    // samples[profile][target] = per-round samples
    let n = targets.len();
    let mut samples = vec![vec![Vec::<Sample>::new(); n]; PROFILES.len()];
    let total = opts.rounds as usize * PROFILES.len() * n;
    let span = Span::Timed {
        runtime_s: opts.runtime_s,
        ramp_s: RAMP_S,
    };
    let mut step = 0;
    for round in 0..opts.rounds {
        for (p, profile) in PROFILES.iter().enumerate() {
            // Rotate which target goes first, so none always runs on a warmer machine.
            for k in 0..n {
                let t = (k + round as usize + p) % n;
                step += 1;
                let (name, uri) = &targets[t];
                eprintln!(
                    "[{step}/{total}] round {} {} on {name}",
                    round + 1,
                    profile.name
                );
                let summary = run_fio(uri, &profile.job, span, opts.size_bytes, &scratch)
                    .with_context(|| format!("{} on {name}", profile.name))?;
                samples[p][t].push(Sample::of(&summary, profile.job.rw.contains("read")));
            }
        }
    }
    let names: Vec<&str> = targets.iter().map(|t| t.0.as_str()).collect();
    let mut table = render(opts, &names, &samples);
    if let Some(cluster) = &cluster {
        let pauses = multihost::failover_pauses(cluster, opts.failovers)?;
        table.push_str(&multihost::render(&pauses));
    }
    Ok(table)
}

fn render(opts: &NbdOptions, names: &[&str], samples: &[Vec<Vec<Sample>>]) -> String {
    let qemu = names.iter().position(|n| *n == "qemu-nbd").unwrap_or(0);
    let mut s = String::new();
    s.push_str(&format!(
        "fio ioengine=nbd, {} rounds x {} s, {} target on tmpfs; medians. `basalt`: `basalt up`, \
         3 OSDs, 3 replicas, in-process gateway. Multi-host: hosts in network namespaces, 2 OSDs \
         each, 3 replicas (failure domain host), NBD gateway on its own host.\n\n",
        opts.rounds,
        opts.runtime_s,
        format_size(opts.size_bytes)
    ));
    s.push_str("| Profile |");
    for n in names {
        s.push_str(&format!(" {n} |"));
    }
    for n in names.iter().filter(|n| **n != "qemu-nbd") {
        s.push_str(&format!(" {n} / qemu-nbd |"));
    }
    for n in names {
        s.push_str(&format!(" {n} mean lat |"));
    }
    s.push_str("\n|---|");
    let cols = names.len() * 2 + names.len() - 1;
    s.push_str(&"---:|".repeat(cols));
    s.push('\n');
    for (p, profile) in PROFILES.iter().enumerate() {
        let seq = profile.job.bs == "1M";
        let metric = |t: usize| -> f64 {
            median(
                samples[p][t]
                    .iter()
                    .map(|x| if seq { x.mib_s } else { x.iops })
                    .collect(),
            )
        };
        let lat = |t: usize| median(samples[p][t].iter().map(|x| x.lat_us_mean).collect());
        let unit = if seq { "MiB/s" } else { "IOPS" };
        s.push_str(&format!("| {} |", profile.name));
        for t in 0..names.len() {
            s.push_str(&format!(" {:.0} {unit} |", metric(t)));
        }
        let q = metric(qemu);
        for t in (0..names.len()).filter(|&t| t != qemu) {
            let r = if q > 0.0 { metric(t) / q } else { 0.0 };
            s.push_str(&format!(" {r:.2}x |"));
        }
        for t in 0..names.len() {
            s.push_str(&format!(" {:.1} us |", lat(t)));
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_a_column_per_target_and_ratio() {
        // Goal: the table shows each target's median, the ratio to qemu-nbd and the latency,
        // one row per profile.
        let opts = NbdOptions {
            rounds: 3,
            runtime_s: 10,
            size_bytes: 512 << 20,
            scratch: "/dev/shm".into(),
            hosts: 0,
            failovers: 0,
        };
        let sample = |iops: f64| Sample {
            iops,
            mib_s: iops / 10.0,
            lat_us_mean: 100.0,
        };
        let samples: Vec<Vec<Vec<Sample>>> = PROFILES
            .iter()
            .map(|_| {
                vec![
                    vec![sample(50.0), sample(60.0), sample(40.0)],
                    vec![sample(100.0); 3],
                ]
            })
            .collect();
        let table = render(&opts, &["basalt", "qemu-nbd"], &samples);
        assert!(table.contains("3 rounds x 10 s, 512M target"), "{table}");
        assert!(table.contains("| Profile | basalt | qemu-nbd | basalt / qemu-nbd |"));
        assert!(table.contains("| 4k randread QD1 | 50 IOPS | 100 IOPS | 0.50x | 100.0 us |"));
        assert!(table.contains("| 1M seq write QD8 | 5 MiB/s | 10 MiB/s | 0.50x |"));
        assert_eq!(
            table.lines().filter(|l| l.starts_with("| ")).count(),
            1 + PROFILES.len()
        );
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
