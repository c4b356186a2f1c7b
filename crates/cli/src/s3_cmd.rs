//! `basalt s3`: run an S3 gateway of a multi-host cluster, and manage its access keys.

use crate::daemons::{flush_stdout, MetaArgs};
use anyhow::Context;
use basalt_client::Cluster;
use basalt_s3::{GatewayConfig, KeyRing, MasterKey};
use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;

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

/// The cluster, and the latency of its metadata calls (for `/metrics`).
async fn connect_cluster(
    args: &MetaArgs,
) -> anyhow::Result<(Arc<Cluster>, basalt_meta::MetaCollector)> {
    let credentials = args.credentials()?;
    let (meta, latency) = args.connect_timed().await?;
    let map = basalt_client::follow_map(meta.clone())
        .await
        .context("read the cluster map")?;
    Ok((
        Cluster::new_as(meta, map, Some(credentials)),
        basalt_meta::MetaCollector(latency),
    ))
}

/// The pool id of `name`, or a precise error.
pub fn pool_id(cluster: &Cluster, name: &str) -> anyhow::Result<basalt_proto::PoolId> {
    cluster
        .map()
        .pools
        .values()
        .find(|p| p.name == name)
        .map(|p| p.id)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "pool \"{name}\" is not in the cluster map (create it with `basalt pool create`, \
                 or choose one with --pool)"
            )
        })
}

/// Run the gateway until SIGINT/SIGTERM.
pub async fn run_gateway(args: S3Args) -> anyhow::Result<()> {
    let (cluster, meta_latency) = connect_cluster(&args.meta).await?;
    let pool = pool_id(&cluster, &args.pool)?;
    let data_pool = args
        .data_pool
        .as_deref()
        .map(|name| pool_id(&cluster, name))
        .transpose()?;
    let master = MasterKey::load(&args.master_key, true)?;
    let ring = Arc::new(KeyRing::new(cluster.meta().clone(), master));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listen for S3 on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let metrics_addr =
        basalt_node::metrics_http::metrics_addr(args.metrics_listen.as_deref(), Some(addr))?;
    if metrics_addr.is_none() {
        // Before any request: nothing will read the histograms (docs/metrics.md, "Off").
        basalt_metrics::disable_latency();
    }
    let stats = Arc::new(basalt_s3::stats::GatewayStats::default());
    let metrics = match metrics_addr {
        Some(metrics_addr) => {
            let mut registry = basalt_node::metrics_http::registry();
            registry.register_collector(Box::new(cluster.collector()));
            registry.register_collector(Box::new(meta_latency));
            registry.register_collector(Box::new(stats.clone()));
            Some(basalt_node::metrics_http::start(metrics_addr, registry).await?)
        }
        None => None,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let config = GatewayConfig {
        pool,
        data_pool,
        domain: args.domain.clone(),
        reclaim_after: std::time::Duration::from_secs(args.reclaim_after.max(1)),
        lifecycle_every: std::time::Duration::from_secs(args.lifecycle_every.max(1)),
        lifecycle_day: std::time::Duration::from_secs(args.lifecycle_day.max(1)),
        stats,
        body_idle_timeout: std::time::Duration::from_secs(args.body_idle_timeout.max(1)),
        max_connections: args.max_connections.max(1),
    };
    let task = tokio::spawn(basalt_s3::serve(
        listener,
        cluster.clone(),
        ring,
        config,
        stop_rx,
    ));
    println!(
        "S3 gateway serving on http://{addr} (bucket indexes in pool {}, data in pool {}){}",
        args.pool,
        args.data_pool.as_deref().unwrap_or(&args.pool),
        metrics
            .as_ref()
            .map(|(a, _)| format!(", metrics http://{a}/metrics"))
            .unwrap_or_default()
    );
    println!(
        "  keys: basalt s3 key create --user NAME --meta ... --master-key {}",
        args.master_key.display()
    );
    flush_stdout();
    crate::up::wait_for_signal().await?;
    let _ = stop_tx.send(true);
    let _ = task.await;
    if let Some((_, task)) = metrics {
        task.abort();
    }
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
