//! `basalt csi`: the CSI driver Kubernetes runs (docs/design.md, "Kubernetes: the CSI
//! driver"; manifests in contrib/kubernetes).

use crate::daemons::MetaArgs;
use anyhow::Context;
use clap::Args;

/// `basalt csi`'s flags.
#[derive(Args, Debug)]
pub struct CsiArgs {
    /// The global --meta/--keyring flags, filled in by `main`.
    #[arg(skip)]
    pub meta: MetaArgs,
    /// The unix socket the container orchestrator calls (the sidecars' --csi-address).
    #[arg(long, env = "CSI_ENDPOINT", default_value = "unix:///csi/csi.sock")]
    pub endpoint: String,
    /// Which services to serve: controller (the Deployment beside the provisioner,
    /// snapshotter and resizer sidecars), node (the DaemonSet on every node: attaches
    /// volumes) or all.
    #[arg(long, default_value = "controller", value_parser = ["controller", "node", "all"])]
    pub mode: String,
    /// How Kubernetes names this node (spec.nodeName; the DaemonSet passes it) [default:
    /// this machine's name].
    #[arg(long, env = "NODE_ID")]
    pub node_id: Option<String>,
    /// The NBD URI the node attaches a volume through, {volume} standing for its name: a
    /// `basalt nbd` gateway on the node (its unit listens on 127.0.0.1:10809).
    #[arg(long, default_value = "nbd://127.0.0.1:10809/{volume}")]
    pub nbd_uri: String,
    /// Where the node service records the volumes it staged (kept across restarts).
    #[arg(long, default_value = "/var/lib/basalt/csi")]
    pub state_dir: std::path::PathBuf,
    /// The pool of volumes whose StorageClass names none (parameter `pool`).
    #[arg(long, default_value = "rbd")]
    pub default_pool: String,
}

pub async fn run_csi(args: CsiArgs) -> anyhow::Result<()> {
    let mode = basalt_csi::Mode::parse(&args.mode).context("--mode")?;
    let endpoint = basalt_csi::serve::socket_path(&args.endpoint)?;
    let cluster = crate::admin::open_cluster(&args.meta).await?;
    let config = basalt_csi::CsiConfig {
        endpoint: endpoint.clone(),
        mode,
        default_pool: args.default_pool,
        version: basalt_node::build::info().version,
        node_id: args.node_id.unwrap_or_else(basalt_node::hostname),
        nbd_uri: Some(args.nbd_uri),
        state_dir: args.state_dir,
    };
    let server = basalt_csi::CsiServer::bind(config)?;
    let shutdown = async {
        if let Err(e) = basalt_node::signal::wait_for_signal().await {
            tracing::warn!("{e:#}");
        }
        basalt_node::systemd::stopping();
    };
    println!(
        "CSI driver {} serving on unix://{} ({} mode)",
        basalt_csi::DRIVER_NAME,
        endpoint.display(),
        args.mode
    );
    crate::daemons::flush_stdout();
    basalt_node::systemd::ready("CSI driver serving");
    server.run(cluster, shutdown).await?;
    Ok(())
}
