//! `basalt bench nbd`: fio against a Basalt volume, qemu-nbd and nbdkit, interleaved.
//!
//! Every target serves from tmpfs so the comparison measures software cost, not the (noisy)
//! virtual disk. Rounds alternate the targets profile by profile, so drift in the machine's
//! speed affects all alike; the table reports medians and the ratios to qemu-nbd and to
//! nbdkit's file plugin (a thin C server: the practical limit of an NBD server here), and
//! the CPU each server process spends per IO. With
//! `hosts > 0` a multi-host cluster in network namespaces is measured too ([`multihost`]),
//! and its failover pause.
//!
//! [`multihost`]: crate::multihost

use crate::cluster::{ClusterConfig, UpProcess};
use crate::fio::{self, FioTarget, Job, Span};
use crate::progress::Progress;
use crate::results::FioSummary;
use crate::suite::RemoveOnDrop;
use crate::{environment, multihost, procstat};
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
    /// Another `basalt` executable (an earlier build) measured beside this one as
    /// `basalt-before`, for before/after tables from one interleaved run.
    pub before: Option<PathBuf>,
    /// Profiles to run, by id (`rr1`, `rr32`, `rw1`, `rw32`, `sr8`, `sw8`); empty: all.
    pub profiles: Vec<String>,
}

/// Warm-up seconds of every timed run, not measured.
const RAMP_S: u32 = 1;
/// How long qemu-nbd or nbdkit may take to listen.
const SERVER_START: Duration = Duration::from_secs(20);

/// One fio workload of the table.
#[derive(Debug)]
pub struct Profile {
    /// Short id for `--profiles`.
    pub id: &'static str,
    /// Its name in the table.
    pub name: &'static str,
    job: Job,
}

/// A profile running `rw` in blocks of `bs` at queue depth `iodepth`, one job.
const fn profile(
    id: &'static str,
    name: &'static str,
    rw: &'static str,
    bs: &'static str,
    iodepth: u32,
) -> Profile {
    Profile {
        id,
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

/// Every profile of the table, in order.
pub const PROFILES: &[Profile] = &[
    profile("rr1", "4k randread QD1", "randread", "4k", 1),
    profile("rr32", "4k randread QD32", "randread", "4k", 32),
    profile("rw1", "4k randwrite QD1", "randwrite", "4k", 1),
    profile("rw32", "4k randwrite QD32", "randwrite", "4k", 32),
    profile("sr8", "1M seq read QD8", "read", "1M", 8),
    profile("sw8", "1M seq write QD8", "write", "1M", 8),
];

/// The profiles `ids` names (all for none); an unknown id is an error naming the known ones.
fn select_profiles(ids: &[String]) -> anyhow::Result<Vec<&'static Profile>> {
    if ids.is_empty() {
        return Ok(PROFILES.iter().collect());
    }
    ids.iter()
        .map(|id| {
            PROFILES.iter().find(|p| p.id == id).ok_or_else(|| {
                let known: Vec<&str> = PROFILES.iter().map(|p| p.id).collect();
                anyhow::anyhow!("unknown profile \"{id}\"; known: {}", known.join(", "))
            })
        })
        .collect()
}

/// What one fio run measured, in the direction it ran.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    iops: f64,
    mib_s: f64,
    lat_us_mean: f64,
    /// CPU microseconds the server process spent per IO (None: not measured).
    cpu_us_per_io: Option<f64>,
}

impl Sample {
    fn of(summary: &FioSummary, read: bool) -> Sample {
        if read {
            Sample {
                iops: summary.read_iops,
                mib_s: summary.read_mib_s,
                lat_us_mean: summary.read_lat_mean_us,
                cpu_us_per_io: None,
            }
        } else {
            Sample {
                iops: summary.write_iops,
                mib_s: summary.write_mib_s,
                lat_us_mean: summary.write_lat_mean_us,
                cpu_us_per_io: None,
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

/// Start qemu-nbd on a raw file and return it with its NBD URI.
fn start_qemu_nbd(file: &Path, size_bytes: u64) -> anyhow::Result<(Guard, String)> {
    start_server("qemu-nbd", file, size_bytes, |port| {
        let mut cmd = Command::new("qemu-nbd");
        cmd.args(["-f", "raw", "-x", "bench", "-b", "127.0.0.1", "-p"])
            .arg(port.to_string())
            .args(["--shared=8", "--persistent"])
            .arg(file);
        cmd
    })
}

/// Start nbdkit's file plugin on a raw file and return it with its NBD URI.
fn start_nbdkit(file: &Path, size_bytes: u64) -> anyhow::Result<(Guard, String)> {
    start_server("nbdkit", file, size_bytes, |port| {
        let mut cmd = Command::new("nbdkit");
        cmd.args(["--foreground", "-i", "127.0.0.1", "-p"])
            .arg(port.to_string())
            .arg("file")
            .arg(file);
        cmd
    })
}

/// Make `file` (`size_bytes`, sparse), start the server `command(port)` builds on a free
/// loopback port, and wait (bounded) until it listens.
fn start_server(
    name: &str,
    file: &Path,
    size_bytes: u64,
    command: impl FnOnce(u16) -> Command,
) -> anyhow::Result<(Guard, String)> {
    std::fs::File::create(file)?.set_len(size_bytes)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = command(port)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("start {name}"))?;
    let guard = Guard(child);
    let deadline = Instant::now() + SERVER_START;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("{name} did not start listening on port {port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((guard, format!("nbd://127.0.0.1:{port}/bench")))
}

/// A server fio runs against.
struct ServerTarget {
    name: String,
    uri: String,
    /// Its process, for CPU accounting (None: several processes, not measured).
    pid: Option<u32>,
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
    let target = FioTarget::Nbd { uri: uri.into() };
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
    need("nbdkit", "nbdkit")?;
    let profiles = select_profiles(&opts.profiles)?;
    let scratch = opts
        .scratch
        .join(format!("basalt-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("create {}", scratch.display()))?;
    // Declared first, so dropped last: after every daemon using the directory stopped.
    let _cleanup = RemoveOnDrop(scratch.clone());
    let config = ClusterConfig {
        osds: 3,
        replicas: 3,
        ec: None,
        pgs: 32,
        object_size: "128K".into(),
        osd_size: "4G".into(),
        volume_size: format_size(opts.size_bytes),
        s3: false,
        nvmf: false,
        up_args: Vec::new(),
    };
    let basalt = UpProcess::start(
        &scratch.join("basalt"),
        &scratch.join("basalt.log"),
        &config,
    )?;
    let before = match &opts.before {
        Some(exe) => Some(
            UpProcess::start_exe(
                exe,
                &scratch.join("basalt-before"),
                &scratch.join("basalt-before.log"),
                &config,
            )
            .with_context(|| format!("start basalt up from {}", exe.display()))?,
        ),
        None => None,
    };
    let (qemu, qemu_uri) = start_qemu_nbd(&scratch.join("qemu.raw"), opts.size_bytes)?;
    let (nbdkit, nbdkit_uri) = start_nbdkit(&scratch.join("nbdkit.raw"), opts.size_bytes)?;
    let mut targets = vec![
        ServerTarget {
            name: "basalt".into(),
            uri: basalt.uri.clone(),
            pid: Some(basalt.pid()),
        },
        ServerTarget {
            name: "qemu-nbd".into(),
            uri: qemu_uri,
            pid: Some(qemu.0.id()),
        },
        ServerTarget {
            name: "nbdkit".into(),
            uri: nbdkit_uri,
            pid: Some(nbdkit.0.id()),
        },
    ];
    if let Some(before) = &before {
        targets.insert(
            1,
            ServerTarget {
                name: "basalt-before".into(),
                uri: before.uri.clone(),
                pid: Some(before.pid()),
            },
        );
    }
    let cluster = if opts.hosts > 0 {
        eprintln!(
            "starting a {}-host cluster in network namespaces",
            opts.hosts
        );
        let exe = std::env::current_exe().context("find the basalt executable")?;
        let (cluster, uri) =
            multihost::start(opts.hosts, &scratch.join("cluster"), opts.size_bytes, exe)?;
        targets.insert(
            1,
            ServerTarget {
                name: format!("basalt {}-host", opts.hosts),
                uri,
                pid: None,
            },
        );
        // The same volume through a gateway on a storage host, reading its replicas there
        // (the "node-local export" of the CoronaFS report beside the "controller export"
        // above, whose gateway runs on a host without OSDs).
        let (local, uri) = multihost::node_local_gateway(&cluster)?;
        targets.insert(
            2,
            ServerTarget {
                name: format!("basalt {}-host node-local", opts.hosts),
                uri,
                pid: None,
            },
        );
        Some((cluster, local))
    } else {
        None
    };
    // The earlier build on a multi-host cluster of its own, measured in the same rounds.
    let _cluster_before = match (&opts.before, opts.hosts > 0) {
        (Some(exe), true) => {
            eprintln!(
                "starting a {}-host cluster of {} in network namespaces",
                opts.hosts,
                exe.display()
            );
            let (cluster, uri) = multihost::start(
                opts.hosts,
                &scratch.join("cluster-before"),
                opts.size_bytes,
                exe.clone(),
            )
            .with_context(|| format!("start a multi-host cluster from {}", exe.display()))?;
            targets.insert(
                3,
                ServerTarget {
                    name: format!("basalt-before {}-host", opts.hosts),
                    uri,
                    pid: None,
                },
            );
            Some(cluster)
        }
        _ => None,
    };

    eprintln!(
        "preconditioning: writing {} to each target",
        format_size(opts.size_bytes)
    );
    for t in &targets {
        run_fio(&t.uri, &fio::FILL, Span::Once, opts.size_bytes, &scratch)
            .with_context(|| format!("precondition {}", t.name))?;
    }
    // samples[profile][target] = per-round samples
    let n = targets.len();
    let mut samples = vec![vec![Vec::<Sample>::new(); n]; profiles.len()];
    let total = opts.rounds as usize * profiles.len() * n;
    let span = Span::Timed {
        runtime_s: opts.runtime_s,
        ramp_s: RAMP_S,
    };
    let step_s = f64::from(opts.runtime_s + RAMP_S);
    let mut progress = Progress::new(total, total as f64 * step_s, false);
    for round in 0..opts.rounds {
        for (p, profile) in profiles.iter().enumerate() {
            // Rotate which target goes first, so none always runs on a warmer machine.
            for k in 0..n {
                let t = (k + round as usize + p) % n;
                let target = &targets[t];
                progress.step(
                    &format!("round {} {} on {}", round + 1, profile.name, target.name),
                    step_s,
                );
                let cpu_before = target.pid.map(procstat::cpu_seconds).transpose()?;
                let started = Instant::now();
                let summary = run_fio(&target.uri, &profile.job, span, opts.size_bytes, &scratch)
                    .with_context(|| format!("{} on {}", profile.name, target.name))?;
                let wall = started.elapsed().as_secs_f64();
                let cpu_after = target.pid.map(procstat::cpu_seconds).transpose()?;
                let mut sample = Sample::of(&summary, profile.job.rw.contains("read"));
                if let (Some(a), Some(b)) = (cpu_before, cpu_after) {
                    // fio's ramp and start-up are included in the CPU time: charge it to the
                    // IOs the measured rate implies over the whole run (a steady rate).
                    let ios = sample.iops * wall;
                    if ios > 0.0 {
                        sample.cpu_us_per_io = Some((b - a) * 1e6 / ios);
                    }
                }
                samples[p][t].push(sample);
            }
        }
    }
    let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    let mut table = render(opts, &profiles, &names, &samples);
    table.push_str(&render_node_local(&profiles, &names, &samples));
    if let Some((cluster, _local_gateway)) = &cluster {
        let pauses = multihost::failover_pauses(cluster, opts.failovers)?;
        table.push_str(&multihost::render(&pauses));
    }
    Ok(table)
}

/// The CoronaFS report's comparison, from the same rounds: per profile the local disk
/// (qemu-nbd on a file of the scratch filesystem), Basalt in one process (`basalt up`), the
/// volume through a gateway on a host without OSDs (the "controller export": every read
/// crosses the network to a primary) and through a gateway on a storage host reading its
/// replicas there (the "node-local export"), with their ratios. Empty without a node-local
/// target (`--hosts 0`).
fn render_node_local(
    profiles: &[&Profile],
    names: &[&str],
    samples: &[Vec<Vec<Sample>>],
) -> String {
    let find = |pred: &dyn Fn(&str) -> bool| names.iter().position(|n| pred(n));
    let Some(local) = find(&|n| n.starts_with("basalt ") && n.ends_with("-host node-local")) else {
        return String::new();
    };
    let Some(remote) = find(&|n| n.starts_with("basalt ") && n.ends_with("-host")) else {
        return String::new();
    };
    let disk = find(&|n| n == "qemu-nbd");
    let up = find(&|n| n == "basalt");
    let mut s = String::from(
        "\nNode-local reads (the CoronaFS report's table; same rounds): local disk = qemu-nbd \
         on a file of the scratch filesystem; in-process = `basalt up`; controller export = \
         the gateway on a host without OSDs (reads cross to each PG's primary); node-local = \
         a gateway on a storage host with `--read-policy localize` (reads served by the \
         replica there). Medians; mean latency in brackets.\n\n\
         | Profile | local disk | in-process | controller export | node-local | node-local / controller | node-local lat / in-process lat |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
    );
    for (p, profile) in profiles.iter().enumerate() {
        let seq = profile.job.bs == "1M";
        let unit = if seq { "MiB/s" } else { "IOPS" };
        let rate = |t: usize| median_rate(&samples[p][t], seq);
        let lat = |t: usize| median(samples[p][t].iter().map(|x| x.lat_us_mean).collect());
        let cell = |t: Option<usize>| match t {
            Some(t) => format!("{:.0} {unit} ({:.0} us)", rate(t), lat(t)),
            None => "-".into(),
        };
        let ratio = |a: f64, b: f64| {
            if b > 0.0 {
                format!("{:.2}x", a / b)
            } else {
                "-".into()
            }
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            profile.name,
            cell(disk),
            cell(up),
            cell(Some(remote)),
            cell(Some(local)),
            ratio(rate(local), rate(remote)),
            up.map_or("-".into(), |u| ratio(lat(local), lat(u))),
        ));
    }
    s
}

/// The median over rounds of a target's rate: MiB/s for sequential profiles, else IOPS.
fn median_rate(rounds: &[Sample], seq: bool) -> f64 {
    median(
        rounds
            .iter()
            .map(|x| if seq { x.mib_s } else { x.iops })
            .collect(),
    )
}

/// Targets every Basalt figure is compared with.
const BASELINES: &[&str] = &["qemu-nbd", "nbdkit"];

fn render(
    opts: &NbdOptions,
    profiles: &[&Profile],
    names: &[&str],
    samples: &[Vec<Vec<Sample>>],
) -> String {
    let baselines: Vec<usize> = (0..names.len())
        .filter(|&t| BASELINES.contains(&names[t]))
        .collect();
    let measured: Vec<usize> = (0..names.len())
        .filter(|t| !baselines.contains(t))
        .collect();
    let mut s = String::new();
    s.push_str(&format!(
        "fio ioengine=nbd, {} rounds x {} s, {} target, every store and file under {}; medians. \
         `basalt`: `basalt up`, 3 OSDs, 3 replicas, in-process gateway. Multi-host: hosts in network namespaces, 2 OSDs \
         each, 3 replicas (failure domain host), NBD gateway on its own host. CPU: the server \
         process's CPU time over the run divided by the IOs it served.\n\n",
        opts.rounds,
        opts.runtime_s,
        format_size(opts.size_bytes),
        opts.scratch.display()
    ));
    let mut cols = 0;
    s.push_str("| Profile |");
    for n in names {
        s.push_str(&format!(" {n} |"));
        cols += 1;
    }
    for &m in &measured {
        for &b in &baselines {
            s.push_str(&format!(" {} / {} |", names[m], names[b]));
            cols += 1;
        }
    }
    for n in names {
        s.push_str(&format!(" {n} mean lat |"));
        cols += 1;
    }
    let with_cpu: Vec<usize> = (0..names.len())
        .filter(|&t| {
            samples
                .iter()
                .any(|p| p[t].iter().any(|x| x.cpu_us_per_io.is_some()))
        })
        .collect();
    for &t in &with_cpu {
        s.push_str(&format!(" {} CPU/IO |", names[t]));
        cols += 1;
    }
    s.push_str("\n|---|");
    s.push_str(&"---:|".repeat(cols));
    s.push('\n');
    for (p, profile) in profiles.iter().enumerate() {
        let seq = profile.job.bs == "1M";
        let metric = |t: usize| median_rate(&samples[p][t], seq);
        let lat = |t: usize| median(samples[p][t].iter().map(|x| x.lat_us_mean).collect());
        let unit = if seq { "MiB/s" } else { "IOPS" };
        s.push_str(&format!("| {} |", profile.name));
        for t in 0..names.len() {
            s.push_str(&format!(" {:.0} {unit} |", metric(t)));
        }
        for &m in &measured {
            for &b in &baselines {
                let q = metric(b);
                let r = if q > 0.0 { metric(m) / q } else { 0.0 };
                s.push_str(&format!(" {r:.2}x |"));
            }
        }
        for t in 0..names.len() {
            s.push_str(&format!(" {:.1} us |", lat(t)));
        }
        for &t in &with_cpu {
            let cpu: Vec<f64> = samples[p][t]
                .iter()
                .filter_map(|x| x.cpu_us_per_io)
                .collect();
            s.push_str(&format!(" {:.1} us |", median(cpu)));
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_local_table_compares_the_two_gateways() {
        // Goal: with a node-local target the CoronaFS-style table shows local disk,
        // in-process, controller and node-local figures with their ratios; without one it
        // is absent.
        let sample = |iops: f64, lat: f64| Sample {
            iops,
            mib_s: iops / 10.0,
            lat_us_mean: lat,
            cpu_us_per_io: None,
        };
        let names = [
            "basalt",
            "basalt 3-host",
            "basalt 3-host node-local",
            "qemu-nbd",
        ];
        let samples: Vec<Vec<Vec<Sample>>> = PROFILES
            .iter()
            .map(|_| {
                vec![
                    vec![sample(100.0, 80.0); 3],
                    vec![sample(50.0, 200.0); 3],
                    vec![sample(90.0, 100.0); 3],
                    vec![sample(400.0, 20.0); 3],
                ]
            })
            .collect();
        let all = select_profiles(&[]).unwrap();
        let table = render_node_local(&all, &names, &samples);
        assert!(
            table.contains(
                "| 4k randread QD1 | 400 IOPS (20 us) | 100 IOPS (80 us) | 50 IOPS (200 us) | \
                 90 IOPS (100 us) | 1.80x | 1.25x |"
            ),
            "{table}"
        );
        assert_eq!(
            table.lines().filter(|l| l.starts_with("| ")).count(),
            1 + PROFILES.len()
        );
        assert!(render_node_local(&all, &names[..2], &samples).is_empty());
    }

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
            before: None,
            profiles: Vec::new(),
        };
        let sample = |iops: f64| Sample {
            iops,
            mib_s: iops / 10.0,
            lat_us_mean: 100.0,
            cpu_us_per_io: Some(iops / 5.0),
        };
        let samples: Vec<Vec<Vec<Sample>>> = PROFILES
            .iter()
            .map(|_| {
                vec![
                    vec![sample(50.0), sample(60.0), sample(40.0)],
                    vec![sample(100.0); 3],
                    vec![sample(200.0); 3],
                ]
            })
            .collect();
        let all = select_profiles(&[]).unwrap();
        let table = render(&opts, &all, &["basalt", "qemu-nbd", "nbdkit"], &samples);
        assert!(
            table.contains("3 rounds x 10 s, 512M target, every store and file under /dev/shm"),
            "{table}"
        );
        assert!(table.contains(
            "| Profile | basalt | qemu-nbd | nbdkit | basalt / qemu-nbd | basalt / nbdkit |"
        ));
        assert!(
            table.contains(
                "| 4k randread QD1 | 50 IOPS | 100 IOPS | 200 IOPS | 0.50x | 0.25x | 100.0 us |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| 1M seq write QD8 | 5 MiB/s | 10 MiB/s | 20 MiB/s | 0.50x | 0.25x |")
        );
        // CPU per IO: the median of each target's rounds.
        assert!(table.contains("basalt CPU/IO | qemu-nbd CPU/IO | nbdkit CPU/IO |"));
        assert!(table.contains("| 10.0 us | 20.0 us | 40.0 us |"), "{table}");
        assert_eq!(
            table.lines().filter(|l| l.starts_with("| ")).count(),
            1 + PROFILES.len()
        );
        let some = select_profiles(&["rw32".into(), "sw8".into()]).unwrap();
        assert_eq!(some.len(), 2);
        assert_eq!(some[1].name, "1M seq write QD8");
        let err = select_profiles(&["rw64".into()]).unwrap_err().to_string();
        assert!(
            err.contains("unknown profile \"rw64\"; known: rr1, rr32"),
            "{err}"
        );
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
