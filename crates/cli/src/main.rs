//! `basalt`: run a Basalt cluster, manage its volumes, and measure it.

mod admin;
mod auth_cmd;
mod bench;
mod config;
mod control;
mod csi_cmd;
mod daemons;
mod disk_cmd;
mod drain_cmd;
mod exit;
mod global;
mod help;
mod image_cmd;
mod iostat;
mod objvol_cmd;
mod progress;
mod s3_cmd;
mod scrub_cmd;
mod settings_cmd;
mod status;
mod up;
mod volume_cmd;
mod watch;

use clap::{CommandFactory, Parser, Subcommand};
use std::path::PathBuf;

/// This binary's release and the commit it was built from (build.rs).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("BASALT_COMMIT"), ")");

/// Default address of the control API of `basalt up`.
/// Where `basalt up` puts its control socket by default (DATA_DIR/control.sock).
pub const DEFAULT_CONTROL: &str = "basalt-data/control.sock";

#[derive(Parser, Debug)]
#[command(
    name = "basalt",
    version = VERSION,
    about = "Basalt: replicated block volumes over NBD on a cluster of commodity disks",
    long_about = "Basalt pools disks into replicated block volumes served over NBD.\n\n\
        One machine: start a local cluster with `basalt up`, then attach \
        `nbd://127.0.0.1:10809/vol0` with qemu, qemu-img, nbdcopy or fio, and manage volumes \
        with `basalt volume`.\n\n\
        Many machines: run etcd; make the cluster's secret once with `basalt cluster init \
        --meta etcd://ETCD:2379 --keyring /etc/basalt/keyring` and copy that file (mode \
        0600) to every host; then on every host `basalt osd --meta etcd://ETCD:2379 \
        --keyring /etc/basalt/keyring --data DIR --listen IP:PORT`. With the same --meta and \
        --keyring (or BASALT_META and BASALT_KEYRING), create a pool with `basalt pool \
        create rbd`, volumes with `basalt volume create`, and serve them with `basalt nbd`. \
        `basalt status` shows the cluster.\n\n\
        Scripts: the global flags (--meta, --keyring, --control, --json, --no-wait, \
        --wait-timeout) go in any position and are also read from BASALT_META, \
        BASALT_KEYRING, BASALT_CONTROL, ...; a command that changes the cluster returns once \
        clients see the change. Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 exists \
        or conflict, 5 not visible within --wait-timeout. Errors go to stderr only. \
        docs/cli.md has the details and the JSON schemas."
)]
struct Cli {
    #[command(flatten)]
    global: global::GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
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
        /// Pool of new volumes.
        #[arg(long, global = true, default_value = "rbd")]
        pool: String,
        #[command(subcommand)]
        command: volume_cmd::VolumeCommand,
    },
    /// Import VM images (raw, qcow2) and manage them; volumes are made from them in O(1)
    /// with `basalt volume create NAME --from-image IMAGE`.
    Image {
        /// Pool of new images.
        #[arg(long, global = true, default_value = "rbd")]
        pool: String,
        #[command(subcommand)]
        command: image_cmd::ImageCommand,
    },
    /// Object-backed read-only volumes: an S3 bucket served over NBD as an EROFS
    /// filesystem whose file data is fetched from the bucket as it is read.
    Objvol {
        /// Pool of objvol indexes.
        #[arg(long, global = true, default_value = "rbd")]
        pool: String,
        #[command(subcommand)]
        command: objvol_cmd::ObjvolCommand,
    },
    /// Show the cluster's health, OSDs, PG states and capacity (like `ceph -s`).
    Status {
        /// Seconds over which client and recovery rates are measured (0: no rates, answer
        /// at once).
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Print cluster events as they happen (OSD up/down/in/out, PG state changes,
        /// recovery start and finish), checking every --interval seconds, until Ctrl-C.
        #[arg(long, conflicts_with = "json")]
        watch: bool,
        /// Also list the OSDs and PGs each health check concerns (`basalt health` shows
        /// only the checks).
        #[arg(long, conflicts_with = "watch")]
        detail: bool,
    },
    /// Check every copy of every object and repair what disagrees.
    ///
    /// Replicated pools: each replica's whole object is compared with the primary's, and a
    /// damaged, missing or different copy is replaced. Erasure-coded pools: every chunk of
    /// every stripe is read; missing, stale or damaged chunks are rebuilt, and the parity
    /// is recomputed and compared (a disagreeing chunk is located when the code has m ≥ 2).
    /// Exits non-zero when something could not be repaired.
    ///
    /// Examples:
    ///   basalt scrub    # the `basalt up` cluster
    ///   basalt scrub --meta etcd://10.0.0.1:2379 --keyring /etc/basalt/keyring --pool cold
    #[command(verbatim_doc_comment)]
    Scrub {
        /// Only this pool (default: every pool).
        #[arg(long)]
        pool: Option<String>,
    },
    /// Run one storage daemon (OSD) of a multi-host cluster, or administer OSDs.
    ///
    /// The OSD registers itself (a new id on first start, kept in DATA/osd.json), holds a
    /// liveness lease in etcd, and also runs a monitor candidate (--no-monitor to not).
    ///
    /// Examples:
    ///   basalt cluster init --meta etcd://10.0.0.1:2379 --keyring /etc/basalt/keyring  # once
    ///   basalt osd --meta etcd://10.0.0.1:2379 --keyring /etc/basalt/keyring \
    ///       --data /var/lib/basalt/osd0 --listen 10.0.0.2:6800
    ///   basalt osd ls --meta etcd://10.0.0.1:2379 --keyring /etc/basalt/keyring
    // No args_conflicts_with_subcommands: it would refuse global flags before `osd ls`.
    #[command(verbatim_doc_comment)]
    Osd {
        #[command(subcommand)]
        command: Option<admin::OsdAdminCommand>,
        #[command(flatten)]
        args: daemons::OsdArgs,
    },
    /// Drain or remove every OSD of a host (a host is known by its OSDs' `--host`).
    ///
    /// Examples:
    ///   basalt host drain node3
    ///   basalt host rm node3
    #[command(verbatim_doc_comment)]
    Host {
        #[command(subcommand)]
        command: drain_cmd::HostCommand,
    },
    /// Make a block device into an OSD's store (`disk prepare`), list those (`disk ls`).
    ///
    /// Examples:
    ///   basalt disk prepare /dev/nvme1n1
    ///   basalt osd --device /dev/nvme1n1 --data /var/lib/basalt/osd0 --listen 10.0.0.2:6800
    ///   basalt disk ls --json
    #[command(verbatim_doc_comment)]
    Disk {
        #[command(subcommand)]
        command: disk_cmd::DiskCommand,
    },
    /// Run an S3 gateway of a multi-host cluster, or manage its access keys.
    ///
    /// Stateless: several gateways may serve the same buckets. Every gateway and key
    /// command of a cluster must share the --master-key file.
    ///
    /// Examples:
    ///   basalt s3 --meta etcd://10.0.0.1:2379 --keyring /etc/basalt/keyring \
    ///       --listen 0.0.0.0:9000
    ///   basalt s3 key create --meta etcd://10.0.0.1:2379 --user alice
    // No args_conflicts_with_subcommands: it would refuse global flags before `s3 key`.
    #[command(verbatim_doc_comment)]
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
    /// Run the CSI driver Kubernetes calls (csi.basalt.dev): volumes and snapshots for
    /// PersistentVolumeClaims and VolumeSnapshots.
    ///
    /// Examples:
    ///   basalt csi --meta etcd://10.0.0.1:2379 --endpoint unix:///csi/csi.sock --mode controller
    #[command(verbatim_doc_comment)]
    Csi(csi_cmd::CsiArgs),
    /// Run an NVMe/TCP gateway of a multi-host cluster: every volume as subsystem
    /// nqn.2026-01.io.basalt:VOLUME (one namespace), plus a discovery controller.
    Nvmf(daemons::NvmfArgs),
    /// Create and list pools (redundancy schemes) of a multi-host cluster.
    Pool {
        #[command(subcommand)]
        command: admin::PoolCommand,
    },
    /// The cluster's secret (`cluster init`, once, before any daemon starts) and its
    /// settings (`cluster get`, `cluster set`).
    Cluster {
        #[command(subcommand)]
        command: auth_cmd::ClusterCommand,
    },
    /// What is wrong with the cluster and what clears it (like `ceph health detail`); mute
    /// a check during maintenance.
    ///
    /// Examples:
    ///   basalt health
    ///   basalt health mute OSD_DOWN --for 2h
    #[command(verbatim_doc_comment)]
    Health {
        #[command(subcommand)]
        command: Option<settings_cmd::HealthCommand>,
    },
    /// Client keys of a multi-host cluster: add (one per hypervisor or gateway), ls, rm.
    ///
    /// Every connection to an OSD proves a key; a removed key stops working at once.
    /// Needs the admin keyring made by `basalt cluster init`.
    Auth {
        #[command(subcommand)]
        command: auth_cmd::AuthCommand,
    },
    /// Inspect placement groups of a multi-host cluster, or give up their unfound stripes.
    Pg {
        #[command(subcommand)]
        command: admin::PgCommand,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// The config file (/etc/basalt/basalt.toml, or --config): check it.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Print a shell completion script for bash, zsh, fish, elvish or powershell.
    ///
    /// Examples:
    ///   basalt completions bash > /etc/bash_completion.d/basalt
    ///   basalt completions zsh > "${fpath[1]}/_basalt"
    ///   basalt completions fish > ~/.config/fish/completions/basalt.fish
    #[command(verbatim_doc_comment)]
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Write man pages (basalt.1 and one per subcommand, basalt-volume-create.1 ...) to a
    /// directory.
    ///
    /// Example:
    ///   basalt man --out /usr/local/share/man/man1
    #[command(verbatim_doc_comment)]
    Man {
        /// Directory to write the pages to (created if missing).
        #[arg(long, default_value = ".")]
        out: PathBuf,
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
    basalt_node::build::set_version(VERSION);
    quiet_on_closed_stdout();
    let argv = match config::apply(std::env::args_os().collect()) {
        Ok(argv) => argv,
        Err(e) => {
            eprintln!("error: {e:#}");
            return std::process::ExitCode::from(exit::USAGE);
        }
    };
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print on stdout and succeed; a bad command line is a
            // usage error, on stderr.
            let _ = e.print();
            return std::process::ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    if let Some(level) = cli.command.log_level() {
        init_logging(level);
    }
    match run(cli.command, cli.global) {
        Ok(()) => std::process::ExitCode::from(exit::OK),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(exit::code(&e))
        }
    }
}

impl Command {
    /// The default log level: daemons log what they do (info), commands that answer and
    /// exit only what goes wrong (warn); completions and man pages log nothing.
    fn log_level(&self) -> Option<&'static str> {
        match self {
            Command::Up(_)
            | Command::Osd { command: None, .. }
            | Command::S3 { command: None, .. }
            | Command::Mon(_)
            | Command::Nbd(_)
            | Command::Csi(_)
            | Command::Nvmf(_) => Some("info"),
            Command::Completions { .. } | Command::Man { .. } | Command::Config { .. } => None,
            _ => Some("warn"),
        }
    }
}

/// Run `command`; the daemons get the global cluster-access flags.
fn run(command: Command, global: global::GlobalArgs) -> anyhow::Result<()> {
    let target = |pool| volume_cmd::VolumeApi::new(&global, pool);
    match command {
        Command::Up(args) => block_on(up::run(args, global.meta.data_tls.clone())),
        Command::Volume { pool, command } => block_on(volume_cmd::run(target(pool), command)),
        Command::Image { pool, command } => block_on(image_cmd::run(target(pool), command)),
        Command::Objvol { pool, command } => block_on(objvol_cmd::run(target(pool), command)),
        Command::Scrub { pool } => {
            block_on(scrub_cmd::run(target("rbd".into()), pool, global.json))
        }
        Command::Status {
            interval,
            watch,
            detail,
        } => block_on(status::run(&global, interval, watch, detail)),
        Command::Osd {
            command: Some(command),
            args: _,
        } => block_on(admin::run_osd_admin(&global, command)),
        Command::Osd {
            command: None,
            mut args,
        } => {
            args.meta = global.meta;
            block_on(daemons::run_osd(args))
        }
        Command::Host { command } => block_on(drain_cmd::run_host(&global, command)),
        Command::Disk { command } => block_on(disk_cmd::run(command, &global.meta, global.json)),
        Command::S3 {
            command: Some(command),
            mut args,
        } => {
            args.meta = global.meta.clone();
            let target = s3_cmd::KeyTarget {
                meta: global.meta,
                control: global.control,
                json: global.json,
            };
            block_on(s3_cmd::run_command(&args, &target, command))
        }
        Command::S3 {
            command: None,
            mut args,
        } => {
            args.meta = global.meta;
            block_on(s3_cmd::run_gateway(args))
        }
        Command::Mon(mut args) => {
            args.meta = global.meta;
            block_on(daemons::run_mon(args))
        }
        Command::Nbd(mut args) => {
            args.meta = global.meta;
            block_on(daemons::run_nbd(args))
        }
        Command::Csi(mut args) => {
            args.meta = global.meta;
            block_on(csi_cmd::run_csi(args))
        }
        Command::Nvmf(mut args) => {
            args.meta = global.meta;
            block_on(daemons::run_nvmf(args))
        }
        Command::Pool { command } => block_on(admin::run_pool(&global, command)),
        Command::Cluster { command } => block_on(auth_cmd::run_cluster(&global, command)),
        Command::Health { command } => block_on(settings_cmd::run_health(&global, command)),
        Command::Auth { command } => {
            block_on(auth_cmd::run_auth(&global.meta, global.json, command))
        }
        Command::Pg { command } => block_on(admin::run_pg(&global, command)),
        Command::Bench { command } => bench::run(command, &global.meta),
        Command::Config {
            command: ConfigCommand::Check,
        } => config_check(&global),
        Command::Completions { shell } => help::completions(&mut Cli::command(), shell),
        Command::Man { out } => help::man_pages(&Cli::command(), &out),
    }
}

/// `basalt config ...`
#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Check the config file and print, for each command and instance it configures, the
    /// flags it adds (the command line and BASALT_* variables still override them). A bad
    /// file is an error naming the table and key (exit 2), as it is for every command.
    ///
    /// Examples:
    ///   basalt config check
    ///   basalt config check --config ./basalt.toml
    #[command(verbatim_doc_comment)]
    Check,
}

/// `basalt config check`.
fn config_check(global: &global::GlobalArgs) -> anyhow::Result<()> {
    let (file, lines) = config::describe(global.config.as_deref())?;
    if global.json {
        let map: serde_json::Map<String, serde_json::Value> = lines
            .into_iter()
            .map(|(cmd, words)| (cmd, words.into()))
            .collect();
        println!("{}", serde_json::to_string_pretty(&map)?);
        return Ok(());
    }
    println!("{}: valid", file.display());
    for (cmd, words) in lines {
        println!("  {cmd}");
        for w in words {
            println!("      {w}");
        }
    }
    Ok(())
}

/// Run `work` to its end on a new multi-threaded runtime.
fn block_on(work: impl std::future::Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    runtime()?.block_on(work)
}

/// A reader that stops early (`basalt volume ls | head -1`) ends the program quietly with
/// the status a shell gives a tool killed by SIGPIPE (141), as other Unix tools do. Rust
/// ignores SIGPIPE, so printing to a closed pipe panics instead; this crate forbids the
/// unsafe code that would restore the signal, so the panic hook recognises that panic.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
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
