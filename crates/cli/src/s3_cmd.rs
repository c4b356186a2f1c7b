//! `basalt s3`: run an S3 gateway of a multi-host cluster, and manage its access keys.

use crate::daemons::{flush_stdout, MetaArgs};
use anyhow::Context;
use basalt_client::Cluster;
use basalt_s3::keys;
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
    #[command(flatten)]
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
}

/// `basalt s3 ...` subcommands.
#[derive(Subcommand, Debug)]
pub enum S3Command {
    /// Manage access keys.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
}

/// `basalt s3 key ...`.
#[derive(Subcommand, Debug)]
pub enum KeyCommand {
    /// Create an access key; the secret is printed once and never again.
    Create {
        /// The user the key acts as (buckets belong to users; several keys may share one).
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

async fn connect_cluster(meta: &MetaArgs) -> anyhow::Result<Arc<Cluster>> {
    let meta = meta.connect().await?;
    let map = basalt_client::follow_map(meta.clone())
        .await
        .context("read the cluster map")?;
    Ok(Cluster::new(meta, map))
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
    let cluster = connect_cluster(&args.meta).await?;
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
    let (stop_tx, stop_rx) = watch::channel(false);
    let config = GatewayConfig {
        pool,
        data_pool,
        domain: args.domain.clone(),
        reclaim_after: std::time::Duration::from_secs(args.reclaim_after.max(1)),
    };
    let task = tokio::spawn(basalt_s3::serve(
        listener,
        cluster.clone(),
        ring,
        config,
        stop_rx,
    ));
    println!(
        "S3 gateway serving on http://{addr} (bucket indexes in pool {}, data in pool {})",
        args.pool,
        args.data_pool.as_deref().unwrap_or(&args.pool)
    );
    println!(
        "  keys: basalt s3 key create --meta ... --master-key {}",
        args.master_key.display()
    );
    flush_stdout();
    crate::up::wait_for_signal().await?;
    let _ = stop_tx.send(true);
    let _ = task.await;
    Ok(())
}

/// Run a `basalt s3 key` command.
pub async fn run_command(args: &S3Args, command: S3Command) -> anyhow::Result<()> {
    let S3Command::Key { command } = command;
    let meta = args.meta.connect().await?;
    match command {
        KeyCommand::Create { user } => {
            let master = MasterKey::load(&args.master_key, true)?;
            let (record, secret) = keys::create_key(meta.as_ref(), &master, &user).await?;
            println!("access key: {}", record.access_key);
            println!("secret key: {secret}");
            println!("user:       {}", record.user);
            println!("(the secret is shown only now)");
        }
        KeyCommand::Ls => {
            let mut all = keys::list_keys(meta.as_ref()).await?;
            all.sort_by(|a, b| a.access_key.cmp(&b.access_key));
            println!("{:<22} {:<16} CREATED", "ACCESS KEY", "USER");
            for k in all {
                println!("{:<22} {:<16} {}", k.access_key, k.user, k.created);
            }
        }
        KeyCommand::Rm { access_key } => {
            keys::remove_key(meta.as_ref(), &access_key).await?;
            println!("removed access key {access_key}");
        }
    }
    Ok(())
}
