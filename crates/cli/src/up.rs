//! `basalt up`: a real replicated cluster in one process.
//!
//! Three OSDs (each with its own store file and TCP listener), an embedded metadata store,
//! an in-process monitor that owns the cluster map, an NBD gateway and the control API. Every
//! byte goes client → primary OSD → replicas over the same data-plane protocol a multi-host
//! cluster uses.

use crate::gateway::VolumeExports;
use anyhow::{bail, Context};
use basalt_client::{parse_size, Cluster};
use basalt_meta::{EmbeddedMeta, MetaStore};
use basalt_osd::{Osd, OsdConfig, OsdHandle};
use basalt_placement::{ClusterMap, FailureDomain, OsdInfo, PoolSpec};
use basalt_proto::PoolId;
use basalt_store::StoreOptions;
use clap::Args;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;

/// Metadata key of the cluster map.
const MAP_KEY: &str = "/basalt/map";
/// The pool `basalt up` creates.
const POOL_ID: PoolId = 1;
const POOL_NAME: &str = "rbd";

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Directory holding the metadata and every OSD's store file.
    #[arg(long, default_value = "./basalt-data")]
    data_dir: PathBuf,
    /// NBD listen address (TCP).
    #[arg(long, default_value = "127.0.0.1:10809")]
    nbd_listen: SocketAddr,
    /// NBD unix socket path [default: DATA_DIR/nbd.sock].
    #[arg(long)]
    nbd_socket: Option<PathBuf>,
    /// Control API listen address (used by `basalt volume`).
    #[arg(long, default_value = crate::DEFAULT_CONTROL)]
    control_listen: SocketAddr,
    /// Number of OSDs (first start only).
    #[arg(long, default_value_t = 3)]
    osds: u32,
    /// Replicas per object (first start only; at most --osds).
    #[arg(long, default_value_t = 3)]
    replicas: u32,
    /// Capacity of each OSD's store file, e.g. 8G (first start only; the file is sparse).
    #[arg(long, default_value = "8G")]
    osd_size: String,
    /// Object size of the pool, e.g. 128K (first start only).
    #[arg(long, default_value = "128K")]
    object_size: String,
    /// Placement groups of the pool (first start only).
    #[arg(long, default_value_t = 32)]
    pgs: u32,
    /// Name of the volume created on first start ("" for none); also the default NBD export.
    #[arg(long, default_value = "vol0")]
    default_volume: String,
    /// Size of the default volume.
    #[arg(long, default_value = "1G")]
    default_volume_size: String,
    /// Send the gateway's requests to the in-process OSDs over TCP too, instead of calling
    /// their request handlers directly (replication always uses TCP).
    #[arg(long)]
    no_local_path: bool,
}

/// Load the map, or create the initial one on first start.
async fn load_or_init_map(
    meta: &dyn MetaStore,
    args: &UpArgs,
) -> anyhow::Result<(ClusterMap, bool)> {
    if let Some((bytes, _)) = meta.get(MAP_KEY).await? {
        let map: ClusterMap = serde_json::from_slice(&bytes).context("decode the cluster map")?;
        return Ok((map, false));
    }
    if args.osds == 0 || args.replicas == 0 || args.replicas > args.osds {
        bail!(
            "--replicas must be between 1 and --osds ({}), got {}",
            args.osds,
            args.replicas
        );
    }
    if args.pgs == 0 || args.pgs > 65536 {
        bail!("--pgs must be between 1 and 65536, got {}", args.pgs);
    }
    let object_size = parse_size(&args.object_size)?;
    if !object_size.is_power_of_two() || !(4096..=4 << 20).contains(&object_size) {
        bail!("--object-size must be a power of two between 4K and 4M, got {object_size}");
    }
    let capacity = parse_size(&args.osd_size)?;
    let mut map = ClusterMap::default();
    for id in 0..args.osds {
        map.osds.insert(
            id,
            OsdInfo {
                id,
                host: "localhost".into(),
                addr: String::new(),
                weight: (capacity >> 30).max(1),
                up: false,
                is_in: true,
            },
        );
    }
    map.pools.insert(
        POOL_ID,
        PoolSpec {
            id: POOL_ID,
            name: POOL_NAME.into(),
            size: args.replicas,
            min_size: args.replicas.min(2),
            pg_count: args.pgs,
            // One host: replicas are kept on distinct OSDs (distinct store files).
            failure_domain: FailureDomain::Osd,
            object_size: object_size as u32,
        },
    );
    Ok((map, true))
}

fn osd_store_path(data_dir: &Path, id: u32) -> PathBuf {
    data_dir.join(format!("osd.{id}")).join("store.dat")
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("create data directory {}", args.data_dir.display()))?;
    let meta: Arc<dyn MetaStore> = Arc::new(
        EmbeddedMeta::open(&args.data_dir.join("meta.json")).context("open cluster metadata")?,
    );
    let (mut map, first_start) = load_or_init_map(meta.as_ref(), &args).await?;
    let capacity = parse_size(&args.osd_size)?;
    let object_size = map
        .pools
        .get(&POOL_ID)
        .map(|p| p.object_size)
        .unwrap_or(128 << 10);

    // Start the OSDs; they learn the map (with their addresses) once all are listening.
    let (map_tx, map_rx) = watch::channel(Arc::new(map.clone()));
    let mut osds: Vec<OsdHandle> = Vec::new();
    for &id in map.osds.keys() {
        let path = osd_store_path(&args.data_dir, id);
        std::fs::create_dir_all(path.parent().expect("store path has a parent"))?;
        let config = OsdConfig {
            id,
            store_path: path,
            store_options: StoreOptions {
                capacity_bytes: capacity,
                object_size_bytes: object_size,
                ..StoreOptions::default()
            },
            listen: "127.0.0.1:0".parse().expect("valid address"),
            create_if_missing: first_start,
        };
        let handle = Osd::start(config, map_rx.clone())
            .await
            .with_context(|| format!("start osd.{id}"))?;
        osds.push(handle);
    }
    for h in &osds {
        let info = map.osds.get_mut(&h.osd.id).expect("osd in map");
        info.addr = h.addr.to_string();
        info.up = true;
    }
    map.recompute();
    meta.put(MAP_KEY, serde_json::to_vec(&map)?).await?;
    map_tx.send_replace(Arc::new(map.clone()));

    let cluster = Cluster::new(meta.clone(), map_rx.clone());
    if !args.no_local_path {
        for h in &osds {
            let handler = Arc::new(basalt_osd::LocalOsd(h.osd.clone()));
            cluster.add_local_osd(h.osd.id, &h.addr.to_string(), handler);
        }
    }
    if first_start && !args.default_volume.is_empty() {
        let size = parse_size(&args.default_volume_size)?;
        cluster
            .create_volume(&args.default_volume, size, POOL_ID)
            .await
            .with_context(|| format!("create the default volume {}", args.default_volume))?;
    }

    // Frontends.
    let default = (!args.default_volume.is_empty()).then(|| args.default_volume.clone());
    let exports = Arc::new(VolumeExports::new(cluster.clone(), default));
    let nbd = basalt_nbd::Server::new(exports);
    let tcp = tokio::net::TcpListener::bind(args.nbd_listen)
        .await
        .with_context(|| format!("listen for NBD on {}", args.nbd_listen))?;
    let socket_path = args
        .nbd_socket
        .clone()
        .unwrap_or_else(|| args.data_dir.join("nbd.sock"));
    let _ = std::fs::remove_file(&socket_path);
    let unix = tokio::net::UnixListener::bind(&socket_path)
        .with_context(|| format!("listen for NBD on {}", socket_path.display()))?;
    let control = tokio::net::TcpListener::bind(args.control_listen)
        .await
        .with_context(|| format!("listen for the control API on {}", args.control_listen))?;
    let tcp_addr = tcp.local_addr()?;
    let control_addr = control.local_addr()?;
    let nbd_tcp = tokio::spawn(nbd.clone().serve_tcp(tcp));
    let nbd_unix = tokio::spawn(nbd.clone().serve_unix(unix));
    let control_task = tokio::spawn(crate::control::serve(control, cluster.clone(), POOL_ID));

    let nbd_addr = tcp_addr;
    print_banner(&args, &map, nbd_addr, control_addr, &socket_path);

    wait_for_signal().await?;
    eprintln!("basalt: shutting down (finishing in-flight requests)...");
    control_task.abort();
    let _ = control_task.await;
    nbd.shutdown();
    let _ = nbd_tcp.await;
    let _ = nbd_unix.await;
    // Release every handle on the cluster (the exports hold one) so the stores can close.
    drop(nbd);
    let _ = std::fs::remove_file(&socket_path);
    // Everything acknowledged becomes durable before the stores close.
    if let Err(e) = cluster.flush().await {
        tracing::error!("final flush failed: {e}");
    }
    drop(cluster);
    for h in osds {
        let id = h.osd.id;
        h.shutdown()
            .await
            .with_context(|| format!("stop osd.{id}"))?;
    }
    eprintln!("basalt: stopped cleanly");
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("wait for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}

fn print_banner(
    args: &UpArgs,
    map: &ClusterMap,
    nbd: SocketAddr,
    control: SocketAddr,
    socket: &Path,
) {
    let pool = &map.pools[&POOL_ID];
    let vol = if args.default_volume.is_empty() {
        "VOLUME".to_string()
    } else {
        args.default_volume.clone()
    };
    println!(
        "Basalt is up: {} OSDs, pool \"{}\" ({} replicas, {} PGs), data in {}",
        map.osds.len(),
        pool.name,
        pool.size,
        pool.pg_count,
        args.data_dir.display()
    );
    println!("  NBD (TCP):   nbd://{nbd}/{vol}");
    println!(
        "  NBD (unix):  nbd+unix:///{vol}?socket={}",
        socket.display()
    );
    println!("  Control API: {control} (basalt volume --control {control} ls)");
    println!("Try:");
    println!("  qemu-img info nbd://{nbd}/{vol}");
    println!("  nbdinfo nbd://{nbd}/{vol}");
    println!(
        "  fio --name=try --ioengine=nbd --uri=nbd://{nbd}/{vol} --rw=randrw --bs=4k \
         --iodepth=32 --size=256M --runtime=10 --time_based"
    );
    println!("Press Ctrl-C to stop.");
    use std::io::Write;
    let _ = std::io::stdout().flush();
}
