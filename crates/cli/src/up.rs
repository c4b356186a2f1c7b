//! `basalt up`: a real replicated cluster in one process.
//!
//! Three OSDs (each with its own store file and TCP listener), an embedded metadata store,
//! a monitor, an NBD gateway and the control API, all in one process and all the same code a
//! multi-host cluster runs: the OSDs register under leases, the monitor derives the map,
//! primaries peer their PGs. Every byte goes client → primary OSD → replicas over the same
//! data-plane protocol.

use anyhow::{bail, Context};
use basalt_client::Cluster;
use basalt_meta::schema::{pool_key, PoolRecord, MAP_KEY, OSDS_PREFIX};
use basalt_meta::{EmbeddedMeta, MetaStore};
use basalt_nbd::VolumeExports;
use basalt_osd::{Osd, OsdConfig, OsdHandle, RecoveryConfig, Registration};
use basalt_proto::size::parse_size;
use basalt_store::StoreOptions;
use clap::Args;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;

/// The pool `basalt up` creates.
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
    /// Serve every volume over NVMe/TCP at this address too, e.g. 127.0.0.1:4420 (off by
    /// default): subsystem nqn.2026-01.io.basalt:VOLUME, one namespace each.
    #[arg(long)]
    nvmf_listen: Option<SocketAddr>,
    /// Control socket (used by `basalt volume`, `image`, ...), mode 0600: only its owner
    /// manages the cluster [default: DATA_DIR/control.sock].
    #[arg(long)]
    control_socket: Option<PathBuf>,
    /// Number of OSDs (first start only).
    #[arg(long, default_value_t = 3)]
    osds: u32,
    /// Replicas per object (first start only; at most --osds).
    #[arg(long, default_value_t = 3)]
    replicas: u32,
    /// Erasure-code the pool instead of replicating it: K data + M parity chunks per
    /// stripe, e.g. 2+1 (first start only; needs --osds at least K+M). Stripes are K ×
    /// --object-size; S3 bucket indexes then live in a small replicated pool "s3index"
    /// and their data in the erasure-coded pool.
    #[arg(long, value_name = "K+M", conflicts_with = "replicas")]
    ec: Option<String>,
    /// Capacity of each OSD's store file, e.g. 8G (first start only; the file is sparse).
    #[arg(long, default_value = "8G")]
    osd_size: String,
    /// Object size of the OSDs' stores and of the pool, e.g. 128K (first start only; with
    /// --ec each stripe is K of them).
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
    /// S3 API listen address ("off" for none). Access keys: DATA_DIR/s3-credentials.
    #[arg(long, default_value = "127.0.0.1:9000")]
    s3_listen: String,
    /// Base domain for virtual-host-style S3 requests (BUCKET.DOMAIN).
    #[arg(long, default_value = "localhost")]
    s3_domain: String,
    /// Seconds after which the data of an S3 upload that never finished (the process died
    /// mid-upload) is reclaimed.
    #[arg(long, default_value_t = 3600)]
    s3_reclaim_after: u64,
    /// Seconds between two passes of the S3 lifecycle worker over the buckets' rules.
    #[arg(long, default_value_t = 3600)]
    s3_lifecycle_every: u64,
    /// Seconds in a lifecycle "day" (rules count days of this length). Only to test rules:
    /// keep the default of 86400 in use.
    #[arg(long, default_value_t = 86_400)]
    s3_lifecycle_day: u64,
    /// Seconds an S3 request body may send nothing before the request is cut off.
    #[arg(long, default_value_t = 30)]
    s3_body_idle_timeout: u64,
    /// S3 connections served at once; beyond, new ones are answered 503 SlowDown.
    #[arg(long, default_value_t = basalt_s3::server::DEFAULT_MAX_CONNECTIONS)]
    s3_max_connections: usize,
    /// Serve Prometheus metrics of this process (OSDs, NBD, NVMe/TCP, S3, client; see
    /// docs/metrics.md) at http://ADDR/metrics; port 0 picks a free one, shown in the
    /// banner. "off": no endpoint, and no latency histograms or frontend counters are kept
    /// (what metrics cost, saved).
    #[arg(long, default_value = "127.0.0.1:0")]
    metrics_listen: String,
    /// Export per-volume metrics for the first N volumes opened on NBD and NVMe/TCP (0:
    /// totals only; the bound keeps a scrape's size independent of the volume count).
    #[arg(long, default_value_t = 0)]
    metrics_per_volume: usize,
    /// Report an OSD operation in flight longer than this many milliseconds as a slow op (a
    /// warn line, `basalt_osd_slow_ops` and `basalt status --watch`).
    #[arg(long, default_value_t = basalt_osd::slow::SLOW_OP_THRESHOLD_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    slow_op_ms: u64,
    /// Send the gateway's requests to the in-process OSDs, and the OSDs' replication to
    /// each other, over loopback TCP too, instead of calling their request handlers directly
    /// (to measure or test the data-plane protocol in one process).
    #[arg(long)]
    no_local_path: bool,
    /// BENCHMARK ONLY, INSECURE: OSDs accept any connection without the authentication
    /// handshake (to measure what authentication costs). Never on a reachable network.
    /// Refused with --data-tls.
    #[arg(long, hide = true)]
    insecure_no_auth: bool,
    #[command(flatten)]
    nbd_tls: crate::daemons::NbdTlsArgs,
}

/// Settings of the pool `basalt up` creates on first start, checked.
fn first_start_pool(args: &UpArgs) -> anyhow::Result<PoolRecord> {
    let object_size = parse_size(&args.object_size)?;
    if let Some(text) = &args.ec {
        let scheme = basalt_ec::Scheme::parse(text).map_err(|e| anyhow::anyhow!("--ec: {e}"))?;
        let (k, m) = (scheme.k() as u32, scheme.m() as u32);
        if args.osds < k + m {
            bail!(
                "--ec {k}+{m} needs --osds {} or more, got {}",
                k + m,
                args.osds
            );
        }
        return Ok(PoolRecord {
            id: 0,
            name: POOL_NAME.into(),
            size: k + m,
            min_size: k + 1,
            pg_count: args.pgs,
            failure_domain: "osd".into(),
            object_size: u32::try_from(object_size)
                .unwrap_or(u32::MAX)
                .saturating_mul(k),
            ec: Some(basalt_proto::EcProfile { k, m }),
        });
    }
    if args.osds == 0 || args.replicas == 0 || args.replicas > args.osds {
        bail!(
            "--replicas must be between 1 and --osds ({}), got {}",
            args.osds,
            args.replicas
        );
    }
    Ok(PoolRecord {
        id: 0,
        name: POOL_NAME.into(),
        size: args.replicas,
        min_size: args.replicas.min(2),
        pg_count: args.pgs,
        // One host: replicas are kept on distinct OSDs (distinct store files).
        failure_domain: "osd".into(),
        object_size: object_size as u32,
        ec: None,
    })
}

/// The object size of the OSDs' stores for `pool`: its object size, or for an
/// erasure-coded pool the size of one chunk.
fn store_object_size(pool: &PoolRecord) -> u32 {
    pool.object_size / pool.ec.map_or(1, |e| e.k)
}

/// For an erasure-coded pool, the replicated pool holding S3 bucket indexes (created on
/// first start, like the main pool).
const S3_INDEX_POOL: &str = "s3index";

async fn s3_index_pool(
    meta: &dyn MetaStore,
    pool: &PoolRecord,
    osds: u32,
) -> anyhow::Result<PoolRecord> {
    if let Some((bytes, _)) = meta.get(&pool_key(S3_INDEX_POOL)).await? {
        return serde_json::from_slice(&bytes).context("decode the s3index pool record");
    }
    let replicas = osds.min(3);
    let record = PoolRecord {
        id: 0,
        name: S3_INDEX_POOL.into(),
        size: replicas,
        min_size: replicas.min(2),
        pg_count: 8,
        failure_domain: "osd".into(),
        object_size: store_object_size(pool),
        ec: None,
    };
    Ok(basalt_client::create_pool(meta, record).await?)
}

fn osd_store_path(data_dir: &Path, id: u32) -> PathBuf {
    data_dir.join(format!("osd.{id}")).join("store.dat")
}

/// Liveness lease TTL of the in-process OSDs (they share the process with the metadata, so
/// it only matters for the fencing logic, which runs as in a multi-host cluster).
const LOCAL_LEASE_TTL_SECS: u64 = 5;
/// Longest wait for every PG to become active at start.
const READY_TIMEOUT_MS: u64 = 60_000;

/// Wait until the map shows every OSD of this process up (this run) and every PG active.
async fn wait_ready(cluster: &Cluster, osds: &[OsdHandle]) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(READY_TIMEOUT_MS);
    // Bound: READY_TIMEOUT_MS of 50 ms rounds.
    loop {
        let map = cluster.map();
        let registered = osds.iter().all(|h| {
            map.osds
                .get(&h.osd.id)
                .is_some_and(|o| o.up && o.incarnation == h.osd.incarnation)
        });
        if registered {
            let records = basalt_client::status::pg_records(cluster).await?;
            let pgs = basalt_client::status::pg_states(&map, &records);
            if !pgs.is_empty() && pgs.iter().all(|p| p.state.starts_with("active")) {
                return Ok(());
            }
        }
        if std::time::Instant::now() > deadline {
            bail!("the cluster did not become active within {READY_TIMEOUT_MS} ms");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Listen on a unix socket at `path` that only this user can connect to: bound under a
/// temporary name, made mode 0600, then renamed into place, so no one can connect while it
/// is still open to all.
fn bind_private_socket(path: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = tokio::net::UnixListener::bind(&tmp)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&tmp, path)?;
    Ok(listener)
}

/// The cluster secret of this data directory: `DATA_DIR/keyring`, made (mode 0600) on the
/// first start. Every TCP connection to the OSDs must prove a key derived from it.
async fn local_secret(
    data_dir: &std::path::Path,
    meta: &dyn MetaStore,
) -> anyhow::Result<basalt_auth::ClusterSecret> {
    use basalt_auth::{registry, AuthError, ClusterSecret, Keyring};
    let path = data_dir.join("keyring");
    if path.exists() {
        let secret = Keyring::load(&path)?.secret()?.clone();
        registry::ensure_cluster(meta, &secret)
            .await
            .with_context(|| format!("check {}", path.display()))?;
        return Ok(secret);
    }
    match registry::check_cluster(meta, &ClusterSecret::generate()?).await {
        Err(AuthError::NotInitialised) => {}
        _ => bail!(
            "{} is missing, and this cluster's secret was in it: restore the file",
            path.display()
        ),
    }
    let secret = ClusterSecret::generate()?;
    Keyring::Cluster(secret.clone()).write_new(&path)?;
    registry::init_cluster(meta, &secret).await?;
    Ok(secret)
}

/// Runs `basalt up`; `data_tls` is the global --data-tls: data-plane TLS on the OSDs' TCP
/// connections, a cluster CA and certificate made in DIR if it holds none (clients of this
/// cluster, `basalt nbd`, `bench --cluster`, ..., then need the same directory).
pub async fn run(args: UpArgs, data_tls: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    if args.insecure_no_auth && data_tls.is_some() {
        anyhow::bail!("--insecure-no-auth cannot be combined with --data-tls");
    }
    // Bad credentials stop the start before anything else happens.
    let nbd_tls = args.nbd_tls.load()?;
    let metrics_addr = crate::daemons::metrics_addr(Some(&args.metrics_listen), None)?;
    if metrics_addr.is_none() {
        // Before any I/O: nothing will read the histograms (docs/metrics.md, "Off").
        basalt_metrics::disable_latency();
    }
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("create data directory {}", args.data_dir.display()))?;
    let meta_latency = Arc::new(basalt_meta::MetaLatency::default());
    let meta: Arc<dyn MetaStore> = Arc::new(basalt_meta::TimedMeta::new(
        Arc::new(
            EmbeddedMeta::open(&args.data_dir.join("meta.json"))
                .context("open cluster metadata")?,
        ),
        meta_latency.clone(),
    ));
    let pool = match meta.get(&pool_key(POOL_NAME)).await? {
        Some((bytes, _)) => {
            serde_json::from_slice::<PoolRecord>(&bytes).context("decode the pool record")?
        }
        None => {
            if meta.get(MAP_KEY).await?.is_some() {
                bail!(
                    "{} holds a cluster made by an older Basalt (no pool record); start from \
                     an empty --data-dir",
                    args.data_dir.display()
                );
            }
            basalt_client::create_pool(meta.as_ref(), first_start_pool(&args)?).await?
        }
    };
    // S3 bucket indexes need a replicated pool; with an erasure-coded main pool they get
    // one of their own and keep their data in the main pool.
    let s3_index = match pool.ec {
        Some(_) => Some(s3_index_pool(meta.as_ref(), &pool, args.osds).await?),
        None => None,
    };
    let known: Vec<u32> = meta
        .list(OSDS_PREFIX)
        .await?
        .iter()
        .filter_map(|(k, _, _)| k[OSDS_PREFIX.len()..].parse().ok())
        .collect();
    let first_start = known.is_empty();
    let ids: Vec<u32> = if first_start {
        (0..args.osds).collect()
    } else {
        known
    };
    let capacity = parse_size(&args.osd_size)?;
    let secret = local_secret(&args.data_dir, meta.as_ref()).await?;
    let authority = Arc::new(basalt_auth::Authority::new(secret.clone(), meta.clone()));
    let authority = if args.insecure_no_auth {
        tracing::warn!(
            "--insecure-no-auth: OSDs accept connections WITHOUT authentication; \
             benchmark use only, never on a reachable network"
        );
        None
    } else {
        Some(authority)
    };
    let data_tls = match &data_tls {
        Some(dir) => {
            if crate::data_tls::ensure(dir)? {
                tracing::info!(
                    "data-plane TLS: made a cluster CA and certificate in {}",
                    dir.display()
                );
            }
            Some(crate::data_tls::load(dir)?)
        }
        None => None,
    };

    // Start the OSDs; each registers, and the monitor puts them in the map.
    let map_rx = basalt_client::follow_map(meta.clone()).await?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut osds: Vec<OsdHandle> = Vec::new();
    let mut keepalives = Vec::new();
    for &id in &ids {
        let path = osd_store_path(&args.data_dir, id);
        std::fs::create_dir_all(path.parent().expect("store path has a parent"))?;
        let config = OsdConfig {
            id,
            store: basalt_osd::StoreLocation::File(path),
            store_options: StoreOptions {
                capacity_bytes: capacity,
                object_size_bytes: store_object_size(&pool),
                ..StoreOptions::default()
            },
            listen: "127.0.0.1:0".parse().expect("valid address"),
            network: match &data_tls {
                Some(tls) => basalt_osd::Network::Tls(tls.clone()),
                None => basalt_osd::Network::Tcp,
            },
            create_if_missing: first_start,
            incarnation: None,
            recovery: RecoveryConfig::default(),
            stray_scan: Some(std::time::Duration::from_secs(30)),
            auth: authority.clone(),
        };
        let handle = Osd::start(config, map_rx.clone(), meta.clone())
            .await
            .with_context(|| format!("start osd.{id}"))?;
        handle.osd.slow.set_threshold_ms(args.slow_op_ms);
        let registration = Registration {
            host: "localhost".into(),
            lease_ttl_secs: LOCAL_LEASE_TTL_SECS,
            metrics_addr: None,
        };
        keepalives.push(
            basalt_osd::register(
                handle.osd.clone(),
                handle.addr,
                registration,
                stop_rx.clone(),
            )
            .await
            .with_context(|| format!("register osd.{id}"))?,
        );
        osds.push(handle);
    }
    let mon_args = crate::daemons::MonArgs {
        // One process: its OSDs never go down alone, so never move data off them.
        out_after: u64::MAX / 2000,
        mon_lease_ttl: LOCAL_LEASE_TTL_SECS,
    };
    let monitor =
        crate::daemons::spawn_monitor(meta.clone(), "basalt up".into(), &mon_args, stop_rx);

    // Over TCP (--no-local-path) this process's own client proves client.admin's key.
    let admin = basalt_auth::Keyring::Cluster(secret)
        .client_credentials()
        .with_tls(data_tls.clone());
    let admin = authority.is_some().then_some(admin);
    let cluster = Cluster::new_as(meta.clone(), map_rx.clone(), admin);
    if !args.no_local_path {
        for h in &osds {
            let handler = Arc::new(basalt_osd::LocalOsd(h.osd.clone()));
            cluster.add_local_osd(h.osd.id, &h.addr.to_string(), handler);
        }
        let linked: Vec<_> = osds
            .iter()
            .map(|h| (h.osd.clone(), h.addr.to_string()))
            .collect();
        basalt_osd::link_in_process(&linked);
    }
    wait_ready(&cluster, &osds).await?;
    if first_start && !args.default_volume.is_empty() {
        let size = parse_size(&args.default_volume_size)?;
        cluster
            .create_volume(&args.default_volume, size, pool.id)
            .await
            .with_context(|| format!("create the default volume {}", args.default_volume))?;
    }

    // Frontends.
    let default = (!args.default_volume.is_empty()).then(|| args.default_volume.clone());
    let gateway = format!("the NBD server of basalt up (pid {})", std::process::id());
    let watchers = basalt_client::watchers::Watchers::new(meta.clone(), gateway);
    let exports = Arc::new(VolumeExports::new(cluster.clone(), default).with_watchers(watchers));
    // Frontends count nothing when no endpoint would export it.
    let frontend_stats = |name| {
        metrics_addr
            .map(|_| basalt_metrics::frontend::FrontendStats::new(name, args.metrics_per_volume))
    };
    let nbd_stats = frontend_stats("nbd");
    let nvmf_stats = frontend_stats("nvmf");
    let nbd = crate::daemons::nbd_server(exports.clone(), nbd_tls.clone(), nbd_stats.clone());
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
    let control_path = args
        .control_socket
        .clone()
        .unwrap_or_else(|| args.data_dir.join("control.sock"));
    let control = bind_private_socket(&control_path)
        .with_context(|| format!("listen for the control API on {}", control_path.display()))?;
    let tcp_addr = tcp.local_addr()?;
    let nbd_tcp = tokio::spawn(nbd.clone().serve_tcp(tcp));
    let nbd_unix = tokio::spawn(nbd.clone().serve_unix(unix));
    let nvmf = match args.nvmf_listen {
        Some(listen) => {
            let tcp = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("listen for NVMe/TCP on {listen}"))?;
            let addr = tcp.local_addr()?;
            let config = basalt_nvmf::TargetConfig {
                stats: nvmf_stats.clone(),
                ..basalt_nvmf::TargetConfig::default()
            };
            let target = basalt_nvmf::Target::with_config(exports.clone(), config);
            let task = tokio::spawn(target.clone().serve_tcp(tcp));
            Some((addr, target, task))
        }
        None => None,
    };
    let s3_master = match args.s3_listen.as_str() {
        "off" => None,
        _ => Some(basalt_s3::MasterKey::load(
            &args.data_dir.join(S3_MASTER_KEY_FILE),
            true,
        )?),
    };
    let (s3_stop, s3_stop_rx) = watch::channel(false);
    let s3_stats = Arc::new(basalt_s3::stats::GatewayStats::default());
    let metrics = match metrics_addr {
        None => None,
        Some(addr) => {
            let mut registry = crate::metrics_http::registry();
            let collector = basalt_osd::metrics::OsdCollector::default();
            for h in &osds {
                collector.add(&h.osd);
            }
            registry.register_collector(Box::new(collector));
            registry.register_collector(Box::new(basalt_meta::MetaCollector(meta_latency.clone())));
            registry.register_collector(Box::new(cluster.collector()));
            registry.register_collector(Box::new(
                basalt_metrics::frontend::FrontendCollector::new(
                    nbd_stats.into_iter().chain(nvmf_stats).collect(),
                ),
            ));
            registry.register_collector(Box::new(s3_stats.clone()));
            Some(crate::metrics_http::start(addr, registry).await?)
        }
    };
    let s3 = match args.s3_listen.as_str() {
        "off" => None,
        listen => {
            let (index, data) = match &s3_index {
                Some(index) => (index.id, Some(pool.id)),
                None => (pool.id, None),
            };
            Some(
                start_s3(
                    &args,
                    listen,
                    &cluster,
                    (index, data),
                    s3_stop_rx,
                    s3_stats.clone(),
                )
                .await?,
            )
        }
    };
    // Objvols over this cluster's own buckets read them through its gateway, as admin.
    let s3_endpoint = s3.as_ref().map(|(addr, _)| {
        let ip = match addr.ip() {
            ip if ip.is_unspecified() => std::net::IpAddr::from([127, 0, 0, 1]),
            ip => ip,
        };
        format!("http://{}", std::net::SocketAddr::new(ip, addr.port()))
    });
    let s3_credentials = s3.as_ref().map(|_| s3_credentials_path(&args.data_dir));
    exports.set_objvol_credentials(s3_credentials.clone());
    let control_task = tokio::spawn(crate::control::serve(
        control,
        cluster.clone(),
        crate::control::ServeContext {
            pool: pool.id,
            nbd_socket: Some(socket_path.clone()),
            s3_master,
            s3_endpoint,
            s3_credentials,
            reserved_pools: std::iter::once(pool.id)
                .chain(s3_index.as_ref().map(|p| p.id))
                .collect(),
        },
    ));

    print_banner(
        &args,
        &pool,
        osds.len(),
        tcp_addr,
        &control_path,
        &socket_path,
        (
            s3.as_ref().map(|(addr, _)| *addr),
            metrics.as_ref().map(|(addr, _)| *addr),
            nvmf.as_ref().map(|(addr, _, _)| *addr),
            nbd_tls.as_deref(),
        ),
    );

    wait_for_signal().await?;
    eprintln!("basalt: shutting down (finishing in-flight requests)...");
    let _ = s3_stop.send(true);
    if let Some((_, task)) = s3 {
        let _ = task.await;
    }
    control_task.abort();
    let _ = control_task.await;
    if let Some((_, task)) = &metrics {
        task.abort();
    }
    nbd.shutdown();
    if let Some((_, target, task)) = nvmf {
        target.shutdown();
        let _ = task.await;
    }
    let _ = nbd_tcp.await;
    let _ = nbd_unix.await;
    // Release every handle on the cluster (the exports hold one) so the stores can close.
    drop(nbd);
    let _ = std::fs::remove_file(&socket_path);
    let _ = std::fs::remove_file(&control_path);
    // Everything acknowledged becomes durable before the stores close.
    if let Err(e) = cluster.flush().await {
        tracing::error!("final flush failed: {e}");
    }
    drop(cluster);
    let _ = stop_tx.send(true);
    let _ = monitor.await;
    for k in keepalives {
        let _ = k.await;
    }
    for h in osds {
        let id = h.osd.id;
        h.shutdown()
            .await
            .with_context(|| format!("stop osd.{id}"))?;
    }
    eprintln!("basalt: stopped cleanly");
    Ok(())
}

pub(crate) async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("wait for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}

/// The S3 credentials file of `basalt up` (AWS shared-credentials format, profile "basalt").
fn s3_credentials_path(data_dir: &Path) -> PathBuf {
    data_dir.join("s3-credentials")
}

/// The file under the data directory holding the key that seals S3 secrets.
const S3_MASTER_KEY_FILE: &str = "s3-master.key";

/// Start the S3 gateway; on first start (no credentials file) create an access key for the
/// user "admin" and write it to DATA_DIR/s3-credentials (mode 0600).
async fn start_s3(
    args: &UpArgs,
    listen: &str,
    cluster: &Arc<Cluster>,
    (pool, data_pool): (basalt_proto::PoolId, Option<basalt_proto::PoolId>),
    stop: watch::Receiver<bool>,
    stats: Arc<basalt_s3::stats::GatewayStats>,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listen: SocketAddr = listen
        .parse()
        .with_context(|| format!("--s3-listen {listen}: expected IP:PORT or \"off\""))?;
    let master = basalt_s3::MasterKey::load(&args.data_dir.join(S3_MASTER_KEY_FILE), true)?;
    let creds = s3_credentials_path(&args.data_dir);
    if !creds.exists() {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let (record, secret) =
            basalt_s3::keys::create_key(cluster.meta().as_ref(), &master, "admin").await?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&creds)
            .with_context(|| format!("create {}", creds.display()))?;
        write!(
            f,
            "[basalt]\naws_access_key_id = {}\naws_secret_access_key = {secret}\n",
            record.access_key
        )
        .and_then(|_| f.sync_all())
        .with_context(|| format!("write {}", creds.display()))?;
    }
    let ring = Arc::new(basalt_s3::KeyRing::new(cluster.meta().clone(), master));
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listen for S3 on {listen}"))?;
    let addr = listener.local_addr()?;
    let config = basalt_s3::GatewayConfig {
        pool,
        data_pool,
        domain: Some(args.s3_domain.clone()),
        reclaim_after: std::time::Duration::from_secs(args.s3_reclaim_after.max(1)),
        lifecycle_every: std::time::Duration::from_secs(args.s3_lifecycle_every.max(1)),
        lifecycle_day: std::time::Duration::from_secs(args.s3_lifecycle_day.max(1)),
        stats: stats.clone(),
        body_idle_timeout: std::time::Duration::from_secs(args.s3_body_idle_timeout.max(1)),
        max_connections: args.s3_max_connections.max(1),
    };
    let task = tokio::spawn(basalt_s3::serve(
        listener,
        cluster.clone(),
        ring,
        config,
        stop,
    ));
    Ok((addr, task))
}

fn print_banner(
    args: &UpArgs,
    pool: &PoolRecord,
    osd_count: usize,
    nbd: SocketAddr,
    control: &Path,
    socket: &Path,
    (s3, metrics, nvmf, tls): (
        Option<SocketAddr>,
        Option<SocketAddr>,
        Option<SocketAddr>,
        Option<&basalt_nbd::TlsConfig>,
    ),
) {
    let vol = if args.default_volume.is_empty() {
        "VOLUME".to_string()
    } else {
        args.default_volume.clone()
    };
    let scheme = match pool.ec {
        Some(ec) => format!("erasure coded {ec}"),
        None => format!("{} replicas", pool.size),
    };
    println!(
        "Basalt is up: {} OSDs, pool \"{}\" ({scheme}, {} PGs), data in {}",
        osd_count,
        pool.name,
        pool.pg_count,
        args.data_dir.display()
    );
    println!("  NBD (TCP):   nbd://{nbd}/{vol}");
    println!(
        "  NBD (unix):  nbd+unix:///{vol}?socket={}",
        socket.display()
    );
    if let Some(tls) = tls {
        println!("  NBD TLS:     {}", tls.describe());
    }
    if let Some(addr) = nvmf {
        println!(
            "  NVMe/TCP:    {addr} subsystem {}",
            basalt_nvmf::volume_nqn(&vol)
        );
    }
    println!(
        "  Control API: {} (basalt volume --control {} ls)",
        control.display(),
        control.display()
    );
    let creds = s3_credentials_path(&args.data_dir);
    if let Some(s3) = s3 {
        println!(
            "  S3:          http://{s3} (access key in {}, profile \"basalt\")",
            creds.display()
        );
    }
    if let Some(addr) = metrics {
        println!("  Metrics:     http://{addr}/metrics");
    }
    println!("Try:");
    if let (Some(tls), Some(dir)) = (tls, &args.nbd_tls.nbd_tls_cert) {
        // libnbd checks the server against DIR/ca-cert.pem (and sends DIR/client-cert.pem).
        println!(
            "  nbdinfo 'nbds://{nbd}/{vol}?tls-certificates={}'",
            dir.display()
        );
        if tls.mode() == basalt_nbd::option::TlsMode::Required {
            println!("  (plaintext nbd:// clients are refused on TCP)");
        }
    }
    if let (Some(_), Some(file)) = (tls, &args.nbd_tls.nbd_tls_psk) {
        println!(
            "  nbdinfo 'nbds://USER@{nbd}/{vol}?tls-psk-file={}'",
            file.display()
        );
    }
    println!("  qemu-img info nbd://{nbd}/{vol}");
    println!("  nbdinfo nbd://{nbd}/{vol}");
    if let Some(addr) = nvmf {
        println!(
            "  nvme connect -t tcp -a {} -s {} -n {}",
            addr.ip(),
            addr.port(),
            basalt_nvmf::volume_nqn(&vol)
        );
    }
    println!(
        "  fio --name=try --ioengine=nbd --uri=nbd://{nbd}/{vol} --rw=randrw --bs=4k \
         --iodepth=32 --size=256M --runtime=10 --time_based"
    );
    if let Some(s3) = s3 {
        println!(
            "  AWS_SHARED_CREDENTIALS_FILE={} aws --profile basalt --endpoint-url \
             http://{s3} s3 mb s3://demo",
            creds.display()
        );
    }
    println!("Press Ctrl-C to stop.");
    use std::io::Write;
    let _ = std::io::stdout().flush();
}
