//! `basalt`: run a Basalt cluster, manage its volumes, and measure it.

mod admin;
mod auth_cmd;
mod bench;
mod control;
mod daemons;
mod data_tls;
mod image_cmd;
mod metrics_http;
mod objvol_cmd;
mod s3_cmd;
mod scrub_cmd;
mod status;
mod up;
mod volume_cmd;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Default address of the control API of `basalt up`.
/// Where `basalt up` puts its control socket by default (DATA_DIR/control.sock).
pub const DEFAULT_CONTROL: &str = "basalt-data/control.sock";

#[derive(Parser)]
#[command(
    name = "basalt",
    version,
    about = "Basalt: replicated block volumes over NBD on a cluster of commodity disks",
    long_about = "Basalt pools disks into replicated block volumes served over NBD.\n\n\
        One machine: start a local cluster with `basalt up`, then attach \
        `nbd://127.0.0.1:10809/vol0` with qemu, qemu-img, nbdcopy or fio, and manage volumes \
        with `basalt volume`.\n\n\
        Many machines: run etcd, then on every host `basalt osd --meta etcd://ETCD:2379 \
        --data DIR --listen IP:PORT`, create a pool with `basalt pool create`, volumes with \
        `basalt volume --meta ... create`, and serve them with `basalt nbd --meta ...`. \
        `basalt status --meta ...` shows the cluster."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a one-process cluster: 3 OSDs, a 3-replica pool, an NBD server and a control API.
    ///
    /// State lives in --data-dir; the next start finds the same volumes and data. The first
    /// start creates the volume `vol0` (1 GiB). Stop with Ctrl-C or SIGTERM.
    Up(up::UpArgs),
    /// Create, list, inspect, resize and remove volumes of a running cluster.
    ///
    /// Talks to `basalt up` through its control API, or to a multi-host cluster through
    /// its metadata with --meta.
    Volume {
        /// Control socket of `basalt up` (DATA_DIR/control.sock).
        #[arg(long, global = true, env = "BASALT_CONTROL", default_value = DEFAULT_CONTROL)]
        control: PathBuf,
        #[command(flatten)]
        meta: daemons::MetaArgs,
        /// Pool of new volumes (with --meta).
        #[arg(long, global = true, default_value = "rbd")]
        pool: String,
        #[command(subcommand)]
        command: volume_cmd::VolumeCommand,
    },
    /// Import VM images (raw, qcow2) and manage them; volumes are made from them in O(1)
    /// with `basalt volume create NAME --from-image IMAGE`.
    Image {
        /// Control socket of `basalt up` (DATA_DIR/control.sock).
        #[arg(long, global = true, env = "BASALT_CONTROL", default_value = DEFAULT_CONTROL)]
        control: PathBuf,
        #[command(flatten)]
        meta: daemons::MetaArgs,
        /// Pool of new images (with --meta).
        #[arg(long, global = true, default_value = "rbd")]
        pool: String,
        #[command(subcommand)]
        command: image_cmd::ImageCommand,
    },
    /// Object-backed read-only volumes: an S3 bucket served over NBD as an EROFS
    /// filesystem whose file data is fetched from the bucket as it is read.
    Objvol {
        /// Control socket of `basalt up` (DATA_DIR/control.sock).
        #[arg(long, global = true, env = "BASALT_CONTROL", default_value = DEFAULT_CONTROL)]
        control: PathBuf,
        #[command(flatten)]
        meta: daemons::MetaArgs,
        /// Pool of objvol indexes (with --meta).
        #[arg(long, global = true, default_value = "rbd")]
        pool: String,
        #[command(subcommand)]
        command: objvol_cmd::ObjvolCommand,
    },
    /// Show the cluster's health, OSDs, PG states and capacity (like `ceph -s`).
    Status {
        /// Control socket of `basalt up` (DATA_DIR/control.sock).
        #[arg(long, env = "BASALT_CONTROL", default_value = DEFAULT_CONTROL)]
        control: PathBuf,
        #[command(flatten)]
        meta: daemons::MetaArgs,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Seconds over which client and recovery rates are measured (0: no rates, answer
        /// at once).
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
    },
    /// Check every copy of every object and repair what disagrees.
    ///
    /// Replicated pools: each replica's whole object is compared with the primary's, and a
    /// damaged, missing or different copy is replaced. Erasure-coded pools: every chunk of
    /// every stripe is read; missing, stale or damaged chunks are rebuilt, and the parity
    /// is recomputed and compared (a disagreeing chunk is located when the code has m ≥ 2).
    /// Exits non-zero when something could not be repaired.
    ///
    /// Example: basalt scrub              (the `basalt up` cluster)
    ///          basalt scrub --meta etcd://10.0.0.1:2379 --pool cold
    Scrub {
        /// Control socket of `basalt up` (DATA_DIR/control.sock).
        #[arg(long, env = "BASALT_CONTROL", default_value = DEFAULT_CONTROL)]
        control: PathBuf,
        #[command(flatten)]
        meta: daemons::MetaArgs,
        /// Only this pool (default: every pool).
        #[arg(long)]
        pool: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run one storage daemon (OSD) of a multi-host cluster, or administer OSDs.
    ///
    /// Example: basalt osd --meta etcd://10.0.0.1:2379 --data /var/lib/basalt/osd0 \
    ///          --listen 10.0.0.2:6800
    ///
    /// The OSD registers itself (a new id on first start, kept in DATA/osd.json), holds a
    /// liveness lease in etcd, and also runs a monitor candidate (--no-monitor to not).
    #[command(args_conflicts_with_subcommands = true)]
    Osd {
        #[command(subcommand)]
        command: Option<admin::OsdAdminCommand>,
        #[command(flatten)]
        args: daemons::OsdArgs,
    },
    /// Run an S3 gateway of a multi-host cluster, or manage its access keys.
    ///
    /// Example: basalt s3 --meta etcd://10.0.0.1:2379 --listen 0.0.0.0:9000
    ///          basalt s3 key create --meta etcd://10.0.0.1:2379 --user alice
    ///
    /// Stateless: several gateways may serve the same buckets. Every gateway and key
    /// command of a cluster must share the --master-key file.
    #[command(args_conflicts_with_subcommands = true)]
    S3 {
        #[command(subcommand)]
        command: Option<s3_cmd::S3Command>,
        #[command(flatten)]
        args: s3_cmd::S3Args,
    },
    /// Run a monitor candidate on its own (OSDs run one each by default).
    Mon(daemons::MonCmdArgs),
    /// Run an NBD gateway of a multi-host cluster: every volume, under its name.
    Nbd(daemons::NbdArgs),
    /// Run an NVMe/TCP gateway of a multi-host cluster: every volume as subsystem
    /// nqn.2026-01.io.basalt:VOLUME (one namespace), plus a discovery controller.
    Nvmf(daemons::NvmfArgs),
    /// Create and list pools (redundancy schemes) of a multi-host cluster.
    Pool {
        #[command(flatten)]
        meta: daemons::MetaArgs,
        #[command(subcommand)]
        command: admin::PoolCommand,
    },
    /// Set up a multi-host cluster's secret (`cluster init`), before any daemon starts.
    Cluster {
        #[command(subcommand)]
        command: auth_cmd::ClusterCommand,
    },
    /// Client keys of a multi-host cluster: add (one per hypervisor or gateway), ls, rm.
    ///
    /// Every connection to an OSD proves a key; a removed key stops working at once.
    /// Needs the admin keyring made by `basalt cluster init`.
    Auth {
        #[command(flatten)]
        meta: daemons::MetaArgs,
        #[command(subcommand)]
        command: auth_cmd::AuthCommand,
    },
    /// Inspect placement groups of a multi-host cluster.
    Pg {
        #[command(flatten)]
        meta: daemons::MetaArgs,
        #[command(subcommand)]
        command: admin::PgCommand,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
}

/// Log at `default` (or as RUST_LOG says). The s3s protocol layer is silenced by default: it
/// logs every error reply (a 404, a NotImplemented) at ERROR with its whole body; what an
/// operator can act on, the gateway logs itself.
fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{default},s3s=off")));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours for a terminal only: a log file or journal gets plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn main() -> std::process::ExitCode {
    basalt_store::memory::keep_io_buffers_in_heap();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Up(args) => {
            init_logging("info");
            runtime().and_then(|rt| rt.block_on(up::run(args)))
        }
        Command::Volume {
            control,
            meta,
            pool,
            command,
        } => {
            init_logging("warn");
            let target = volume_cmd::Target::new(control, meta, pool);
            runtime().and_then(|rt| rt.block_on(volume_cmd::run(target, command)))
        }
        Command::Image {
            control,
            meta,
            pool,
            command,
        } => {
            init_logging("warn");
            let target = volume_cmd::Target::new(control, meta, pool);
            runtime().and_then(|rt| rt.block_on(image_cmd::run(target, command)))
        }
        Command::Objvol {
            control,
            meta,
            pool,
            command,
        } => {
            init_logging("warn");
            let target = volume_cmd::Target::new(control, meta, pool);
            runtime().and_then(|rt| rt.block_on(objvol_cmd::run(target, command)))
        }
        Command::Scrub {
            control,
            meta,
            pool,
            json,
        } => {
            init_logging("warn");
            let target = volume_cmd::Target::new(control, meta, "rbd".into());
            runtime().and_then(|rt| rt.block_on(scrub_cmd::run(target, pool, json)))
        }
        Command::Status {
            control,
            meta,
            json,
            interval,
        } => {
            init_logging("warn");
            let interval_ms = (interval.clamp(0.0, 60.0) * 1000.0) as u64;
            runtime().and_then(|rt| rt.block_on(show_status(control, meta, json, interval_ms)))
        }
        Command::Osd {
            command: Some(command),
            args,
        } => {
            init_logging("warn");
            runtime().and_then(|rt| rt.block_on(admin::run_osd_admin(&args.meta, command)))
        }
        Command::Osd {
            command: None,
            args,
        } => {
            init_logging("info");
            runtime().and_then(|rt| rt.block_on(daemons::run_osd(args)))
        }
        Command::S3 {
            command: Some(command),
            args,
        } => {
            init_logging("warn");
            runtime().and_then(|rt| rt.block_on(s3_cmd::run_command(&args, command)))
        }
        Command::S3 {
            command: None,
            args,
        } => {
            init_logging("info");
            runtime().and_then(|rt| rt.block_on(s3_cmd::run_gateway(args)))
        }
        Command::Mon(args) => {
            init_logging("info");
            runtime().and_then(|rt| rt.block_on(daemons::run_mon(args)))
        }
        Command::Nbd(args) => {
            init_logging("info");
            runtime().and_then(|rt| rt.block_on(daemons::run_nbd(args)))
        }
        Command::Nvmf(args) => {
            init_logging("info");
            runtime().and_then(|rt| rt.block_on(daemons::run_nvmf(args)))
        }
        Command::Pool { meta, command } => {
            init_logging("warn");
            runtime().and_then(|rt| rt.block_on(admin::run_pool(&meta, command)))
        }
        Command::Cluster { command } => {
            init_logging("warn");
            runtime().and_then(|rt| rt.block_on(auth_cmd::run_cluster(command)))
        }
        Command::Auth { meta, command } => {
            init_logging("warn");
            runtime().and_then(|rt| rt.block_on(auth_cmd::run_auth(&meta, command)))
        }
        Command::Pg { meta, command } => {
            init_logging("warn");
            runtime().and_then(|rt| rt.block_on(admin::run_pg(&meta, command)))
        }
        Command::Bench { command } => {
            init_logging("warn");
            bench::run(command)
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn show_status(
    control: PathBuf,
    meta: daemons::MetaArgs,
    json: bool,
    interval_ms: u64,
) -> anyhow::Result<()> {
    let report = if meta.meta.is_some() {
        let cluster = admin::open_cluster(&meta).await?;
        status::gather_with_rates(&cluster, interval_ms).await?
    } else {
        let resp = control::call(&control, &control::Request::Status { interval_ms }).await?;
        resp.status
            .ok_or_else(|| anyhow::anyhow!("the control API sent no status"))?
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        status::print(&report);
    }
    Ok(())
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Where `basalt up` keeps its state by default.
pub fn default_data_dir() -> PathBuf {
    PathBuf::from("./basalt-data")
}
