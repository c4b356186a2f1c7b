//! `basalt bench nbd`: fio against a Basalt volume and against qemu-nbd, interleaved.
//!
//! Both targets serve from tmpfs so the comparison measures software cost, not the (noisy)
//! virtual disk. Rounds alternate Basalt and qemu-nbd profile by profile, so drift in the
//! machine's speed affects both alike; the table reports medians and the ratio.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Compare NBD performance: a Basalt volume (3 replicas, stores on tmpfs) vs qemu-nbd
    /// serving a raw file on tmpfs, with fio's nbd engine.
    Nbd(NbdArgs),
    /// The storage benchmark suite: baselines, then a Basalt volume via NBD, with CPU cost
    ///
    /// Local disk and network baselines first, then a Basalt volume through NBD on the
    /// same fio profiles and those of the seed reports (Torus, Vitastor), with the CPU
    /// Basalt spends per GiB and per 1000 IOs; writes report.md, results.json, SVG plots
    /// and every raw output to --out.
    ///
    /// Two kinds of cluster:
    ///
    ///   --cluster local (the default) starts a `basalt up` (3 OSDs, 3 replicas) in a scratch
    ///   directory under --data-dir, measures it, and also sweeps the OSD count (1-4 OSDs)
    ///   and the replica count on fresh clusters. CPU: the `basalt up` process.
    ///
    ///   --cluster etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE] measures an existing
    ///   multi-host cluster (the --meta URL its daemons take). The benchmark creates a volume
    ///   in --pool, serves it over NBD from its own process on a private unix socket (fio
    ///   connects there), and removes it afterwards, also when a step fails or on Ctrl-C.
    ///   The network baseline runs from every storage host to this one: iperf3 where an
    ///   iperf3 server answers on the host (start `iperf3 -s` there), otherwise a built-in
    ///   stream of reads the OSDs answer from memory. CPU: every OSD's
    ///   process_cpu_seconds_total from its /metrics, plus this process. The OSD-count sweep
    ///   needs a cluster it can rebuild, so it is skipped with a note.
    ///
    /// Examples:
    ///
    ///   basalt bench storage --quick                          # ~2.5 minutes, local cluster
    ///
    ///   basalt bench storage --cluster etcd://10.0.0.1:2379 --pool rbd --out report/
    ///
    ///   basalt bench storage --cluster etcd://10.0.0.1:2379 --quick --sections network,disk
    #[command(verbatim_doc_comment)]
    Storage(StorageArgs),
    /// Print the change of every figure between two `bench storage` results.json files.
    Compare(CompareArgs),
}

#[derive(Args)]
pub struct StorageArgs {
    /// Which cluster to measure: `local` (a `basalt up` the benchmark starts and stops), or
    /// an existing cluster's metadata, etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE].
    #[arg(long, default_value = "local", value_parser = parse_cluster)]
    cluster: String,
    /// Pool of the bench volume on an existing cluster (it must exist; see `basalt pool ls`).
    #[arg(long, default_value = "rbd")]
    pool: String,
    /// Short runs and small sizes: finishes in under 3 minutes on 2 cores (a local cluster).
    #[arg(long)]
    quick: bool,
    /// Run only these sections, comma-separated, in their usual order: network, disk,
    /// torus, vitastor, scaling, s3, plasmavmc. Example: --sections network,disk
    #[arg(long, value_delimiter = ',')]
    sections: Option<Vec<String>>,
    /// Directory being measured: the local disk baseline's test file (and a local
    /// cluster's data) go into a temporary directory under it, removed at the end.
    #[arg(long, visible_alias = "dir", default_value = ".")]
    data_dir: PathBuf,
    /// Output directory for report.md, results.json, the plots and raw/.
    #[arg(long, default_value = "basalt-bench-report")]
    out: PathBuf,
    /// The test guest the plasmavmc section boots (built by scripts/build-guest-image.sh)
    /// [default: target/guest beside this executable, when it exists].
    #[arg(long)]
    guest_dir: Option<PathBuf>,
    /// Even shorter runs (1 s, 64 MiB) for the smoke test; figures mean little.
    #[arg(long, hide = true)]
    smoke: bool,
}

#[derive(Args)]
pub struct CompareArgs {
    /// results.json of the earlier run.
    a: PathBuf,
    /// results.json of the later run.
    b: PathBuf,
}

#[derive(Args)]
pub struct NbdArgs {
    /// Rounds; each runs every profile once on each target.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Seconds per fio run.
    #[arg(long, default_value_t = 10)]
    runtime: u32,
    /// Size of the test volume / file.
    #[arg(long, default_value = "512M")]
    size: String,
    /// Scratch directory on tmpfs.
    #[arg(long, default_value = "/dev/shm")]
    scratch: PathBuf,
    /// Write the table (Markdown) here as well.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also measure a multi-host cluster of this many hosts (network namespaces on this
    /// machine, 2 OSDs each, stores on tmpfs, an NBD gateway on its own host), and the
    /// failover pause after a kill -9 of a primary. Needs root. 0: skip.
    #[arg(long, default_value_t = 0)]
    hosts: usize,
    /// Failover measurements (with --hosts).
    #[arg(long, default_value_t = 3)]
    failovers: usize,
}

/// One fio workload.
struct Profile {
    name: &'static str,
    rw: &'static str,
    bs: &'static str,
    iodepth: u32,
}

const PROFILES: &[Profile] = &[
    Profile {
        name: "4k randread QD1",
        rw: "randread",
        bs: "4k",
        iodepth: 1,
    },
    Profile {
        name: "4k randread QD32",
        rw: "randread",
        bs: "4k",
        iodepth: 32,
    },
    Profile {
        name: "4k randwrite QD1",
        rw: "randwrite",
        bs: "4k",
        iodepth: 1,
    },
    Profile {
        name: "4k randwrite QD32",
        rw: "randwrite",
        bs: "4k",
        iodepth: 32,
    },
    Profile {
        name: "1M seq read QD8",
        rw: "read",
        bs: "1M",
        iodepth: 8,
    },
    Profile {
        name: "1M seq write QD8",
        rw: "write",
        bs: "1M",
        iodepth: 8,
    },
];

/// What one fio run measured.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    iops: f64,
    mib_s: f64,
    lat_us_mean: f64,
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
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !found {
        bail!("{tool} is not installed; install it with: apt-get install -y {package}");
    }
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Start `basalt up` on tmpfs and return it with its NBD URI.
fn start_basalt(dir: &Path, size: &str) -> anyhow::Result<(Guard, String)> {
    let exe = std::env::current_exe().context("find the basalt executable")?;
    let mut child = Command::new(exe)
        .args([
            "up",
            "--nbd-listen",
            "127.0.0.1:0",
            "--control-listen",
            "127.0.0.1:0",
            "--s3-listen",
            "off",
        ])
        .arg("--data-dir")
        .arg(dir)
        .args([
            "--osd-size",
            "4G",
            "--default-volume",
            "bench",
            "--default-volume-size",
            size,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("start basalt up")?;
    let stdout = child.stdout.take().expect("piped stdout");
    let guard = Guard(child);
    let mut uri = None;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if let Some(rest) = line.trim().strip_prefix("NBD (TCP):") {
            uri = Some(rest.trim().to_string());
        }
        if line.starts_with("Press Ctrl-C") {
            break;
        }
    }
    let uri = uri.context("basalt up did not print its NBD address")?;
    Ok((guard, uri))
}

/// Start qemu-nbd on a raw tmpfs file and return it with its NBD URI.
fn start_qemu_nbd(file: &Path, size_bytes: u64) -> anyhow::Result<(Guard, String)> {
    std::fs::File::create(file)?.set_len(size_bytes)?;
    let port = free_port()?;
    let child = Command::new("qemu-nbd")
        .args([
            "-f",
            "raw",
            "-x",
            "bench",
            "-b",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .args(["--shared=8", "--persistent"])
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start qemu-nbd")?;
    let guard = Guard(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("qemu-nbd did not start listening on port {port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((guard, format!("nbd://127.0.0.1:{port}/bench")))
}

fn fio(
    uri: &str,
    rw: &str,
    bs: &str,
    iodepth: u32,
    runtime: Option<u32>,
    size: &str,
    out: &Path,
) -> anyhow::Result<Sample> {
    let mut cmd = Command::new("fio");
    cmd.args(["--name=bench", "--ioengine=nbd", "--thread"])
        .arg(format!("--uri={uri}"))
        .arg(format!("--rw={rw}"))
        .arg(format!("--bs={bs}"))
        .arg(format!("--iodepth={iodepth}"))
        .arg(format!("--size={size}"))
        .args(["--output-format=json", "--randrepeat=0", "--norandommap"])
        .arg(format!("--output={}", out.display()));
    if let Some(rt) = runtime {
        cmd.args(["--time_based", "--ramp_time=1"])
            .arg(format!("--runtime={rt}"));
    }
    let status = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).output()?;
    if !status.status.success() {
        bail!("fio failed: {}", String::from_utf8_lossy(&status.stderr));
    }
    let text = std::fs::read_to_string(out)?;
    let summary = basalt_bench::fio::parse(&text)
        .with_context(|| format!("parse fio output {}", out.display()))?;
    let read = rw.contains("read");
    Ok(Sample {
        iops: if read {
            summary.read_iops
        } else {
            summary.write_iops
        },
        mib_s: if read {
            summary.read_mib_s
        } else {
            summary.write_mib_s
        },
        lat_us_mean: if read {
            summary.read_lat_mean_us
        } else {
            summary.write_lat_mean_us
        },
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Nbd(args) => nbd(args),
        BenchCommand::Storage(args) => storage(args),
        BenchCommand::Compare(args) => {
            print!("{}", basalt_bench::compare_files(&args.a, &args.b)?);
            Ok(())
        }
    }
}

/// `local` or an etcd:// metadata URL.
fn parse_cluster(text: &str) -> Result<String, String> {
    if text == "local" {
        return Ok(text.to_string());
    }
    basalt_meta::parse_meta_url(text).map_err(|_| {
        format!(
            "expected `local` or the metadata URL of an existing cluster, \
             etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE] (the --meta of its daemons); got \
             \"{text}\""
        )
    })?;
    Ok(text.to_string())
}

fn storage(args: StorageArgs) -> anyhow::Result<()> {
    let existing = args.cluster != "local";
    let mut command_line = format!("basalt bench storage --cluster {}", args.cluster);
    if existing {
        command_line.push_str(&format!(" --pool {}", args.pool));
    }
    if args.quick {
        command_line.push_str(" --quick");
    }
    if args.smoke {
        command_line.push_str(" --smoke");
    }
    if let Some(ids) = &args.sections {
        command_line.push_str(&format!(" --sections {}", ids.join(",")));
    }
    command_line.push_str(&format!(
        " --data-dir {} --out {}",
        args.data_dir.display(),
        args.out.display()
    ));
    let opts = basalt_bench::StorageOptions {
        data_dir: args.data_dir,
        out: args.out,
        quick: args.quick,
        smoke: args.smoke,
        sections: args.sections,
        command_line,
        guest_dir: args.guest_dir.clone(),
    };
    opts.check_sections()?;
    let report = if existing {
        let cluster = crate::bench_existing::Existing::connect(&args.cluster, &args.pool)?;
        basalt_bench::run_storage_on(&opts, &cluster)
    } else {
        basalt_bench::run_storage(&opts)
    }
    .context("basalt bench storage")?;
    println!("{}", report.display());
    Ok(())
}

fn nbd(args: NbdArgs) -> anyhow::Result<()> {
    need("fio", "fio")?;
    need("qemu-nbd", "qemu-utils")?;
    let size_bytes = basalt_client::parse_size(&args.size)?;
    let scratch = tempdir_in(&args.scratch)?;
    let _cleanup = RemoveOnDrop(scratch.clone());
    let (_basalt, basalt_uri) = start_basalt(&scratch.join("basalt"), &args.size)?;
    let (_qemu, qemu_uri) = start_qemu_nbd(&scratch.join("qemu.raw"), size_bytes)?;
    let mut targets: Vec<(String, String)> =
        vec![("basalt".into(), basalt_uri), ("qemu-nbd".into(), qemu_uri)];
    let cluster = if args.hosts > 0 {
        eprintln!(
            "starting a {}-host cluster in network namespaces",
            args.hosts
        );
        let (cluster, uri) =
            crate::bench_cluster::start(args.hosts, &scratch.join("cluster"), &args.size)?;
        targets.insert(1, (format!("basalt {}-host", args.hosts), uri));
        Some(cluster)
    } else {
        None
    };
    let out = scratch.join("fio.json");

    eprintln!("preconditioning: writing {} to each target", args.size);
    for (name, uri) in &targets {
        fio(uri, "write", "1M", 8, None, &args.size, &out)
            .with_context(|| format!("precondition {name}"))?;
    }
    // samples[profile][target] = per-round samples
    let n = targets.len();
    let mut samples = vec![vec![Vec::<Sample>::new(); n]; PROFILES.len()];
    let total = args.rounds as usize * PROFILES.len() * n;
    let mut step = 0;
    for round in 0..args.rounds {
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
                let s = fio(
                    uri,
                    profile.rw,
                    profile.bs,
                    profile.iodepth,
                    Some(args.runtime),
                    &args.size,
                    &out,
                )
                .with_context(|| format!("{} on {name}", profile.name))?;
                samples[p][t].push(s);
            }
        }
    }
    let names: Vec<&str> = targets.iter().map(|t| t.0.as_str()).collect();
    let mut table = render(&args, &names, &samples);
    if let Some(cluster) = &cluster {
        let pauses = crate::bench_cluster::failover_pauses(cluster, args.failovers)?;
        table.push_str(&render_failover(&pauses));
    }
    println!("{table}");
    if let Some(path) = &args.out {
        std::fs::write(path, &table).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

fn render_failover(pauses: &[crate::bench_cluster::Failover]) -> String {
    let mut s = String::from(
        "\nFailover pause: 4 KiB writes at QD1 to one PG through the client library; the PG's \
         primary is killed with SIGKILL; the pause runs from the kill to the completion of the \
         first write issued after it (lease TTL 3 s). Target: <= 5 s.\n\n\
         | Trial | Killed | Pause |\n|---:|---|---:|\n",
    );
    for (i, f) in pauses.iter().enumerate() {
        s.push_str(&format!(
            "| {} | osd.{} | {:.2} s |\n",
            i + 1,
            f.osd,
            f.pause.as_secs_f64()
        ));
    }
    let secs: Vec<f64> = pauses.iter().map(|f| f.pause.as_secs_f64()).collect();
    s.push_str(&format!("| median | | {:.2} s |\n", median(secs)));
    s
}

/// Removes a scratch directory however the benchmark ends.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir_in(base: &Path) -> anyhow::Result<PathBuf> {
    let dir = base.join(format!("basalt-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    Ok(dir)
}

fn render(args: &NbdArgs, names: &[&str], samples: &[Vec<Vec<Sample>>]) -> String {
    let qemu = names.iter().position(|n| *n == "qemu-nbd").unwrap_or(0);
    let mut s = String::new();
    s.push_str(&format!(
        "fio ioengine=nbd, {} rounds x {} s, {} target on tmpfs; medians. `basalt`: `basalt up`, \
         3 OSDs, 3 replicas, in-process gateway. Multi-host: hosts in network namespaces, 2 OSDs \
         each, 3 replicas (failure domain host), NBD gateway on its own host.\n\n",
        args.rounds, args.runtime, args.size
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
        let seq = profile.bs == "1M";
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
