//! `basalt bench`: the arguments of the benchmarks in crates/bench, and their output.

use crate::daemons::MetaArgs;
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
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
    ///   multi-host cluster (the --meta URL its daemons take), reached with the access flags
    ///   its daemons take: --keyring (required), --data-tls, and for a secured etcd
    ///   --meta-ca, --meta-cert, --meta-key, --meta-user, --meta-password-file (with
    ///   --cluster local these flags are refused). The benchmark creates a volume
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
    ///   basalt bench storage --cluster etcd://10.0.0.1:2379 --keyring client.keyring \
    ///     --pool rbd --out report/
    ///
    ///   basalt bench storage --cluster etcd://10.0.0.1:2379 --quick --sections network,disk
    #[command(verbatim_doc_comment)]
    Storage(StorageArgs),
    /// Print the change of every figure between two `bench storage` results.json files.
    Compare(CompareArgs),
    /// How the control plane scales with the OSD count: for each size, a cluster of real
    /// `basalt osd` processes in network namespaces (one etcd, stores on tmpfs) left idle,
    /// then measured: etcd messages per second (and per OSD), and the wall time of
    /// `basalt status`. Needs root; each size takes about a minute plus its start.
    ///
    /// Examples:
    ///
    ///   basalt bench fleet                              # 8, 32 and 96 OSDs
    ///   basalt bench fleet --osds 16,100 --osds-per-host 10 --out fleet.md
    #[command(verbatim_doc_comment)]
    Fleet(FleetArgs),
    /// The store's RAM per object (the `memory` section of `bench storage` runs this as a
    /// child process): prints the measurement as JSON.
    #[command(hide = true)]
    StoreMemory(StoreMemoryArgs),
}

#[derive(Args, Debug)]
pub struct StoreMemoryArgs {
    /// Directory for the measured store (a sparse file, removed afterwards).
    #[arg(long)]
    dir: PathBuf,
    /// Objects written.
    #[arg(long, default_value_t = 1_000_000)]
    objects: u64,
}

#[derive(Args, Debug)]
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
    /// torus, vitastor, scaling, s3, strmvol, plasmavmc, nvmf, memory (the store's RAM per
    /// object; not in --quick unless named); and, only when named,
    /// security (authentication and TLS costs) and metrics (metrics on vs off). Example:
    /// --sections network,disk
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
    /// The local cluster's store I/O, passed to `basalt up` (to measure one mode against
    /// another): see `basalt up --help`.
    #[command(flatten)]
    io: crate::daemons::IoArgs,
    /// Even shorter runs (1 s, 64 MiB) for the smoke test; figures mean little.
    #[arg(long, hide = true)]
    smoke: bool,
}

#[derive(Args, Debug)]
pub struct FleetArgs {
    /// Cluster sizes to measure, in OSDs (rounded up to whole hosts).
    #[arg(long, value_delimiter = ',', default_value = "8,32,96")]
    osds: Vec<usize>,
    /// OSDs per host (network namespace).
    #[arg(long, default_value_t = 8)]
    osds_per_host: usize,
    /// Seconds the idle cluster's etcd traffic is counted.
    #[arg(long, default_value_t = 10)]
    idle: u64,
    /// `basalt status` runs timed per size.
    #[arg(long, default_value_t = 5)]
    status_runs: usize,
    /// Where the OSD stores go (tmpfs by default: the disk is not what is measured).
    #[arg(long, default_value = "/dev/shm")]
    scratch: PathBuf,
    /// Write the table (Markdown) here as well.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// results.json of the earlier run.
    a: PathBuf,
    /// results.json of the later run.
    b: PathBuf,
}

#[derive(Args, Debug)]
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
    /// Scratch directory for the stores and files of every target: tmpfs (the default)
    /// measures software cost; a directory on a disk measures the whole path.
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
    /// Also measure this `basalt` executable (an earlier build) as `basalt-before`, in the
    /// same interleaved run: before/after figures that share the machine's drift. With
    /// --hosts, it also runs a multi-host cluster of its own (`basalt-before N-host`).
    #[arg(long, value_name = "PATH")]
    before: Option<PathBuf>,
    /// Run only these profiles (comma-separated ids): rr1 (4k randread QD1), rr32, rw1
    /// (4k randwrite QD1), rw32, sr8 (1M sequential read QD8), sw8. Default: all.
    #[arg(long, value_delimiter = ',')]
    profiles: Vec<String>,
}

/// Run a `basalt bench` command; `meta` holds the global cluster-access flags, which only
/// `bench storage --cluster etcd://...` uses (the other benchmarks refuse them).
pub fn run(command: BenchCommand, meta: &MetaArgs) -> anyhow::Result<()> {
    match command {
        BenchCommand::Nbd(args) => {
            refuse_access_flags(meta, "`bench nbd` starts the clusters it measures")?;
            nbd(args)
        }
        BenchCommand::Storage(args) => storage(args, meta),
        BenchCommand::Fleet(args) => {
            refuse_access_flags(meta, "`bench fleet` starts the clusters it measures")?;
            fleet(args)
        }
        BenchCommand::Compare(args) => {
            print!("{}", basalt_bench::compare_files(&args.a, &args.b)?);
            Ok(())
        }
        BenchCommand::StoreMemory(args) => {
            let m = basalt_bench::store_memory::measure(&args.dir, args.objects)
                .context("basalt bench store-memory")?;
            println!("{}", serde_json::to_string(&m)?);
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

/// The cluster-access flags set in `meta` (each also set by its BASALT_* variable), with
/// their values as the command line gives them.
fn access_flags(meta: &MetaArgs) -> Vec<(&'static str, String)> {
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    [
        ("--meta", meta.meta.clone()),
        ("--meta-ca", path(&meta.meta_ca)),
        ("--meta-cert", path(&meta.meta_cert)),
        ("--meta-key", path(&meta.meta_key)),
        ("--meta-user", meta.meta_user.clone()),
        ("--meta-password-file", path(&meta.meta_password_file)),
        ("--keyring", path(&meta.keyring)),
        ("--data-tls", path(&meta.data_tls)),
    ]
    .into_iter()
    .filter_map(|(flag, value)| Some((flag, value?)))
    .collect()
}

/// Refuse every cluster-access flag (a benchmark that starts its own cluster would ignore
/// it), naming the first one and its variable.
fn refuse_access_flags(meta: &MetaArgs, why: &str) -> anyhow::Result<()> {
    if let Some((flag, _)) = access_flags(meta).first() {
        let var = format!(
            "BASALT_{}",
            flag.trim_start_matches('-')
                .replace('-', "_")
                .to_uppercase()
        );
        bail!(
            "{flag} (or {var}) is for an existing cluster, `bench storage --cluster \
             etcd://...`; {why}, so it would be ignored: leave it out"
        );
    }
    Ok(())
}

/// How `bench storage --cluster URL` reaches the cluster: URL with every access flag given.
fn cluster_access(url: &str, meta: &MetaArgs) -> anyhow::Result<basalt_bench::ClusterAccess> {
    if let Some(other) = meta.meta.as_deref().filter(|m| *m != url) {
        bail!(
            "--meta {other} and --cluster {url} name different clusters; the benchmark \
             measures --cluster (leave --meta out)"
        );
    }
    Ok(basalt_bench::ClusterAccess {
        meta_url: url.to_string(),
        meta: meta.access(),
        keyring: meta.keyring.clone(),
        data_tls: meta.data_tls.clone(),
    })
}

fn storage(args: StorageArgs, meta: &MetaArgs) -> anyhow::Result<()> {
    let existing = args.cluster != "local";
    let access = if existing {
        Some(cluster_access(&args.cluster, meta)?)
    } else {
        refuse_access_flags(meta, "`--cluster local` starts its own `basalt up`")?;
        None
    };
    let mut command_line = format!("basalt bench storage --cluster {}", args.cluster);
    if existing {
        command_line.push_str(&format!(" --pool {}", args.pool));
        // How the cluster was reached, as the report's reader would repeat it.
        for (flag, value) in access_flags(meta).iter().filter(|(f, _)| *f != "--meta") {
            command_line.push_str(&format!(" {flag} {value}"));
        }
    }
    let up_args = args.io.up_args()?;
    if existing && (args.io.buffered_io || args.io.io_engine != "uring") {
        bail!(
            "--io-engine/--buffered-io choose the store I/O of the local cluster this bench \
             starts; an existing cluster's OSDs keep the mode they were started with"
        );
    }
    if !existing {
        command_line.push(' ');
        command_line.push_str(&up_args.join(" "));
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
        up_args,
    };
    let report = match &access {
        Some(access) => basalt_bench::run_storage_on(&opts, access, &args.pool),
        None => basalt_bench::run_storage(&opts),
    }
    .context("basalt bench storage")?;
    println!("{}", report.display());
    Ok(())
}

/// `bench fleet`: one cluster per size, measured in turn.
fn fleet(args: FleetArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    let positive = [args.osds_per_host, args.idle as usize, args.status_runs];
    if args.osds.is_empty() || args.osds.contains(&0) || positive.contains(&0) {
        anyhow::bail!("--osds, --osds-per-host, --idle and --status-runs must be positive");
    }
    let exe = std::env::current_exe().context("find the basalt executable")?;
    let idle = std::time::Duration::from_secs(args.idle);
    let mut rows = Vec::new();
    for &osds in &args.osds {
        eprintln!(
            "fleet: starting {osds} OSDs ({} per host), then {} s idle and {} status runs",
            args.osds_per_host,
            idle.as_secs(),
            args.status_runs
        );
        let row = basalt_bench::fleet::measure(
            osds,
            args.osds_per_host,
            &args.scratch,
            &exe,
            idle,
            args.status_runs,
        )
        .with_context(|| format!("measure a cluster of {osds} OSDs"))?;
        let methods: Vec<String> = row
            .by_method
            .iter()
            .map(|(m, r)| format!("{m} {r:.1}"))
            .collect();
        let calls: Vec<String> = row
            .osd_calls
            .iter()
            .map(|(op, r)| format!("{op} {r:.1}"))
            .collect();
        eprintln!(
            "fleet: {} OSDs: {:.1} etcd msgs/s idle ({}; the OSD processes' calls: {}), status \
             {:.0} ms (median)",
            row.osds,
            row.etcd_messages_per_sec,
            methods.join(", "),
            calls.join(", "),
            row.status_median().as_secs_f64() * 1000.0
        );
        rows.push(row);
    }
    let table = basalt_bench::fleet::table(&rows, idle);
    print!("{table}");
    if let Some(out) = &args.out {
        std::fs::write(out, &table).with_context(|| format!("write {}", out.display()))?;
    }
    Ok(())
}

fn nbd(args: NbdArgs) -> anyhow::Result<()> {
    let opts = basalt_bench::NbdOptions {
        rounds: args.rounds,
        runtime_s: args.runtime,
        size_bytes: basalt_proto::size::parse_size(&args.size)?,
        scratch: args.scratch,
        hosts: args.hosts,
        failovers: args.failovers,
        before: args.before,
        profiles: args.profiles,
    };
    let table = basalt_bench::nbd::run(&opts).context("basalt bench nbd")?;
    println!("{table}");
    if let Some(path) = &args.out {
        std::fs::write(path, &table).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}
