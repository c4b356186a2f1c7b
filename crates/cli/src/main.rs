//! `basalt`: run a Basalt cluster, manage its volumes, and measure it.

mod bench;
mod control;
mod gateway;
mod status;
mod up;
mod volume_cmd;

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Default address of the control API of `basalt up`.
pub const DEFAULT_CONTROL: &str = "127.0.0.1:10810";

#[derive(Parser)]
#[command(
    name = "basalt",
    version,
    about = "Basalt: replicated block volumes over NBD on a cluster of commodity disks",
    long_about = "Basalt pools disks into replicated block volumes served over NBD.\n\n\
        Start a local cluster with `basalt up`, then attach `nbd://127.0.0.1:10809/vol0` with \
        qemu, qemu-img, nbdcopy or fio, and manage volumes with `basalt volume`."
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
    Volume {
        /// Control API address of the cluster (`basalt up --control-listen`).
        #[arg(long, global = true, env = "BASALT_CONTROL", default_value = DEFAULT_CONTROL)]
        control: SocketAddr,
        #[command(subcommand)]
        command: volume_cmd::VolumeCommand,
    },
    /// Show the cluster's health, OSDs, PG states and capacity (like `ceph -s`).
    Status {
        /// Control API address of the cluster (`basalt up --control-listen`).
        #[arg(long, env = "BASALT_CONTROL", default_value = DEFAULT_CONTROL)]
        control: SocketAddr,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Up(args) => {
            init_logging("info");
            runtime().and_then(|rt| rt.block_on(up::run(args)))
        }
        Command::Volume { control, command } => {
            init_logging("warn");
            runtime().and_then(|rt| rt.block_on(volume_cmd::run(control, command)))
        }
        Command::Status { control, json } => {
            init_logging("warn");
            runtime().and_then(|rt| rt.block_on(show_status(control, json)))
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

async fn show_status(control: SocketAddr, json: bool) -> anyhow::Result<()> {
    let resp = control::call(control, &control::Request::Status).await?;
    let report = resp
        .status
        .ok_or_else(|| anyhow::anyhow!("the control API sent no status"))?;
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
