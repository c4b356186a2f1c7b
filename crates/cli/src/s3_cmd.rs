//! `basalt s3`: the flags and banner of an S3 gateway of a multi-host cluster (its
//! lifecycle is `basalt_node::S3Daemon`), and its access keys.

use crate::daemons::MetaArgs;
use basalt_node::{S3Daemon, S3DaemonConfig, S3Settings};
use basalt_s3::MasterKey;
use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Default master key file of a multi-host gateway.
pub const DEFAULT_MASTER_KEY: &str = "/etc/basalt/s3-master.key";

/// `basalt s3` (the gateway).
#[derive(Args, Debug)]
pub struct S3Args {
    /// The global --meta/--keyring flags, filled in by `main`.
    #[arg(skip)]
    pub meta: MetaArgs,
    /// HTTP listen address of the S3 API.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,
    /// Pool new buckets' indexes (and, without --data-pool, their data) are created in; a
    /// replicated pool.
    #[arg(long, default_value = "rbd")]
    pub pool: String,
    /// Pool new buckets' object data is created in, e.g. an erasure-coded pool (default:
    /// --pool).
    #[arg(long)]
    pub data_pool: Option<String>,
    /// File of the key that seals access-key secrets in cluster metadata (hex, 32 bytes).
    /// Every gateway and `basalt s3 key` of a cluster must use the same file; it is
    /// created (mode 0600) when missing. Keep it off the metadata hosts' backups.
    #[arg(long, global = true, default_value = DEFAULT_MASTER_KEY)]
    pub master_key: PathBuf,
    /// Base domain for virtual-host-style requests (BUCKET.DOMAIN); other hosts are
    /// path-style.
    #[arg(long)]
    pub domain: Option<String>,
    /// Seconds after which the data of an upload that never finished (its gateway died) is
    /// reclaimed. Live uploads refresh their record every minute.
    #[arg(long, default_value_t = 3600)]
    pub reclaim_after: u64,
    /// Seconds between two passes of the lifecycle worker over the buckets' rules.
    #[arg(long, default_value_t = 3600)]
    pub lifecycle_every: u64,
    /// Seconds in a lifecycle "day" (rules count days of this length). Only to test rules:
    /// keep the default of 86400 in use.
    #[arg(long, default_value_t = 86_400)]
    pub lifecycle_day: u64,
    /// Seconds a request body may send nothing before the request is cut off (nothing of
    /// it is stored).
    #[arg(long, default_value_t = 30)]
    pub body_idle_timeout: u64,
    /// Connections served at once; beyond, new ones are answered 503 SlowDown.
    #[arg(long, default_value_t = basalt_s3::server::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Serve Prometheus metrics (S3 requests by operation and API class, latency, the
    /// client's and the metadata's) at http://ADDR/metrics [default: 127.0.0.1 and the
    /// --listen port + 1000; give an IP:PORT to let a Prometheus server elsewhere scrape it;
    /// "off" for none, which also stops recording latency histograms].
    #[arg(long)]
    pub metrics_listen: Option<String>,
}

/// `basalt s3 ...` subcommands.
#[derive(Subcommand, Debug)]
pub enum S3Command {
    /// Manage access keys: of a local `basalt up` (through its control API), or of a
    /// multi-host cluster (with --meta).
    ///
    /// Examples:
    ///   basalt s3 key create --user alice
    ///   basalt s3 key create --user alice --meta etcd://10.0.0.1:2379
    ///   basalt s3 key ls
    #[command(verbatim_doc_comment)]
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
}

/// Whose keys a `basalt s3 key` command manages: a multi-host cluster's (with --meta; the
/// key is sealed with --master-key, which every gateway shares), else those of the running
/// `basalt up` behind --control (it seals them with its own master key).
#[derive(Debug, Clone)]
pub struct KeyTarget {
    pub meta: MetaArgs,
    pub control: PathBuf,
    pub json: bool,
}

/// `basalt s3 key ...`.
#[derive(Subcommand, Debug)]
pub enum KeyCommand {
    /// Create an access key; the secret is printed once and never again.
    Create {
        /// The user the key acts as (buckets belong to users; several keys may share one):
        /// letters, digits, '-', '_' and '.', at most 64.
        #[arg(long, default_value = "admin")]
        user: String,
    },
    /// List access keys (never their secrets).
    Ls,
    /// Remove an access key (gateways stop accepting it within 5 seconds).
    Rm {
        /// The access key id (BK...).
        access_key: String,
    },
}

impl S3Args {
    /// The gateway's flags as its config: the cluster's metadata (its calls timed) and
    /// what the gateway proves to its OSDs.
    async fn daemon_config(self) -> anyhow::Result<S3DaemonConfig> {
        let credentials = self.meta.credentials()?;
        let (meta, meta_latency) = self.meta.connect_timed().await?;
        let secs = Duration::from_secs;
        Ok(S3DaemonConfig {
            meta,
            meta_latency,
            credentials,
            pool: self.pool,
            data_pool: self.data_pool,
            master_key: self.master_key,
            settings: S3Settings {
                listen: self.listen,
                domain: self.domain,
                reclaim_after: secs(self.reclaim_after),
                lifecycle_every: secs(self.lifecycle_every),
                lifecycle_day: secs(self.lifecycle_day),
                body_idle_timeout: secs(self.body_idle_timeout),
                max_connections: self.max_connections,
            },
            metrics_listen: self.metrics_listen,
        })
    }
}

/// Run the gateway until SIGINT/SIGTERM.
pub async fn run_gateway(args: S3Args) -> anyhow::Result<()> {
    let config = args.daemon_config().await?;
    let master_key = config.master_key.clone();
    let data_pool = config
        .data_pool
        .clone()
        .unwrap_or_else(|| config.pool.clone());
    let pool = config.pool.clone();
    let gateway = S3Daemon::start(config).await?;
    println!(
        "S3 gateway serving on http://{} (bucket indexes in pool {pool}, data in pool \
         {data_pool}){}",
        gateway.addr,
        gateway
            .metrics
            .map(|a| format!(", metrics http://{a}/metrics"))
            .unwrap_or_default()
    );
    println!(
        "  keys: basalt s3 key create --user NAME --meta ... --master-key {}",
        master_key.display()
    );
    crate::daemons::serve_until_signal(&format!("S3 gateway serving on {}", gateway.addr)).await?;
    gateway.stop().await;
    Ok(())
}

/// Run a `basalt s3 key` command, on a multi-host cluster's metadata (--meta) or through
/// the control API of `basalt up`.
pub async fn run_command(
    args: &S3Args,
    target: &KeyTarget,
    command: S3Command,
) -> anyhow::Result<()> {
    use crate::control::{Request, S3Key};
    let S3Command::Key { command } = command;
    let (req, removed) = match command {
        KeyCommand::Create { user } => (Request::S3KeyCreate { user }, None),
        KeyCommand::Ls => (Request::S3KeyLs, None),
        KeyCommand::Rm { access_key } => (
            Request::S3KeyRm {
                access_key: access_key.clone(),
            },
            Some(access_key),
        ),
    };
    let reply = match &target.meta.meta {
        None => crate::control::call(&target.control, &req).await?,
        Some(_) => {
            let meta = target.meta.connect().await?;
            let master = match req {
                Request::S3KeyCreate { .. } => Some(MasterKey::load(&args.master_key, true)?),
                _ => None,
            };
            let reply = crate::control::s3_key_request(meta.as_ref(), master.as_ref(), req).await;
            if !reply.ok {
                return Err(reply.into_error().into());
            }
            reply
        }
    };
    let show = |k: &S3Key| {
        format!(
            "{:<22} {:<16} {}",
            k.access_key,
            k.user,
            basalt_bench::environment::utc_from_unix(k.created)
        )
    };
    if target.json {
        let value = match (&reply.s3_key, &reply.s3_keys, &removed) {
            (Some(k), _, _) => serde_json::to_value(k)?,
            (_, Some(all), _) => serde_json::to_value(all)?,
            (_, _, Some(access_key)) => serde_json::json!({ "removed": access_key }),
            _ => serde_json::Value::Null,
        };
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    if let Some(k) = reply.s3_key {
        println!("access key: {}", k.access_key);
        println!("secret key: {}", k.secret.as_deref().unwrap_or("-"));
        println!("user:       {}", k.user);
        println!("(the secret is shown only now)");
    } else if let Some(all) = reply.s3_keys {
        println!("{:<22} {:<16} CREATED", "ACCESS KEY", "USER");
        for k in &all {
            println!("{}", show(k));
        }
    } else if let Some(access_key) = removed {
        println!("removed access key {access_key}");
    }
    Ok(())
}
