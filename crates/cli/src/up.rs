//! `basalt up`: its flags, and its banner; the one-process cluster itself is
//! `basalt_node::LocalCluster`.

use crate::daemons::parse_size_or_zero;
use anyhow::Context;
use basalt_meta::schema::PoolRecord;
use basalt_node::{Endpoints, LocalCluster, LocalConfig, ReadyFile, S3Settings};
use basalt_proto::size::parse_size;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Volumes whose I/O `basalt up` counts on their own by default (`volume iostat`, and
/// per-volume series on `/metrics`).
const UP_VOLUMES_COUNTED: usize = 64;

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
    /// WAL size of each OSD's store, e.g. 64M (first start only) [default: an eighth of
    /// --osd-size, 4 MiB to 256 MiB]. The WAL is allocated on disk even though the rest of
    /// the store file is sparse; a smaller one checkpoints more often.
    #[arg(long, value_name = "SIZE")]
    wal_size: Option<String>,
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
    /// Count and export per-volume metrics for the first N volumes opened on NBD and
    /// NVMe/TCP (0: totals only, and `basalt volume iostat` shows nothing; the bound keeps a
    /// scrape's size independent of the volume count).
    #[arg(long, default_value_t = UP_VOLUMES_COUNTED)]
    metrics_per_volume: usize,
    /// Report an OSD operation in flight longer than this many milliseconds as a slow op (a
    /// warn line, `basalt_osd_slow_ops` and `basalt status --watch`).
    #[arg(long, default_value_t = basalt_osd::slow::SLOW_OP_THRESHOLD_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    slow_op_ms: u64,
    #[command(flatten)]
    io: crate::daemons::IoArgs,
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
    /// Once everything serves, write PATH (atomically: whole or not at all): a JSON object
    /// of every endpoint the banner shows, for scripts and tests (docs/cli.md). Removed at
    /// start and on a clean stop.
    #[arg(long, value_name = "PATH")]
    ready_file: Option<PathBuf>,
    #[command(flatten)]
    nbd_tls: crate::daemons::NbdTlsArgs,
    /// Also serve the CSI driver (`basalt csi --mode all`: controller and node, attaching
    /// through this cluster's NBD listener) on this unix socket, for a one-node Kubernetes
    /// or csi-sanity (docs/cli.md, "Kubernetes: `basalt csi`").
    #[arg(long, value_name = "unix:///PATH")]
    csi_endpoint: Option<String>,
}

/// The cluster `args` describe; `data_tls` is the global --data-tls: data-plane TLS on the
/// OSDs' TCP connections, a cluster CA and certificate made in DIR if it holds none
/// (clients of this cluster, `basalt nbd`, `bench --cluster`, ..., then need the same
/// directory).
fn local_config(args: &UpArgs, data_tls: Option<PathBuf>) -> anyhow::Result<LocalConfig> {
    if args.insecure_no_auth && data_tls.is_some() {
        anyhow::bail!("--insecure-no-auth cannot be combined with --data-tls");
    }
    // Bad credentials stop the start before anything else happens.
    let nbd_tls = args.nbd_tls.load()?;
    let metrics = basalt_node::metrics_http::metrics_addr(Some(&args.metrics_listen), None)?;
    let data_tls = match &data_tls {
        Some(dir) => {
            if basalt_node::data_tls::ensure(dir)? {
                tracing::info!(
                    "data-plane TLS: made a cluster CA and certificate in {}",
                    dir.display()
                );
            }
            Some(basalt_node::data_tls::load(dir)?)
        }
        None => None,
    };
    let default_volume = match args.default_volume.as_str() {
        "" => None,
        name => Some((name.to_string(), parse_size(&args.default_volume_size)?)),
    };
    Ok(LocalConfig {
        data_dir: args.data_dir.clone(),
        nbd_listen: args.nbd_listen,
        nbd_socket: args.nbd_socket.clone(),
        nvmf_listen: args.nvmf_listen,
        control_socket: args.control_socket.clone(),
        osds: args.osds,
        replicas: args.replicas,
        ec: args.ec.clone(),
        osd_size_bytes: parse_size(&args.osd_size)?,
        wal_bytes: parse_size_or_zero(args.wal_size.as_deref())?,
        object_size_bytes: parse_size(&args.object_size)?,
        pgs: args.pgs,
        default_volume,
        s3: s3_settings(args)?,
        metrics,
        metrics_per_volume: args.metrics_per_volume,
        slow_op_ms: args.slow_op_ms,
        io: args.io.options()?,
        local_path: !args.no_local_path,
        insecure_no_auth: args.insecure_no_auth,
        nbd_tls,
        data_tls,
    })
}

/// The S3 gateway's settings, or None with `--s3-listen off`.
fn s3_settings(args: &UpArgs) -> anyhow::Result<Option<S3Settings>> {
    let listen = match args.s3_listen.as_str() {
        "off" => return Ok(None),
        listen => listen
            .parse()
            .with_context(|| format!("--s3-listen {listen}: expected IP:PORT or \"off\""))?,
    };
    Ok(Some(S3Settings {
        listen,
        domain: Some(args.s3_domain.clone()),
        reclaim_after: Duration::from_secs(args.s3_reclaim_after),
        lifecycle_every: Duration::from_secs(args.s3_lifecycle_every),
        lifecycle_day: Duration::from_secs(args.s3_lifecycle_day),
        body_idle_timeout: Duration::from_secs(args.s3_body_idle_timeout),
        max_connections: args.s3_max_connections,
    }))
}

/// Runs `basalt up` until Ctrl-C or SIGTERM, then stops it cleanly.
pub async fn run(args: UpArgs, data_tls: Option<PathBuf>) -> anyhow::Result<()> {
    if let Some(path) = &args.ready_file {
        // An old file must not be taken for this run's.
        let _ = std::fs::remove_file(path);
    }
    let config = local_config(&args, data_tls)?;
    let nbd_tls = config.nbd_tls.clone();
    let cluster = LocalCluster::start(config).await?;
    let csi = match &args.csi_endpoint {
        Some(endpoint) => Some(start_csi(&args, &cluster, endpoint)?),
        None => None,
    };
    print_banner(&args, &cluster.pool, &cluster.endpoints, nbd_tls);
    let ready = match &args.ready_file {
        Some(path) => ReadyFile::of(&cluster.endpoints)
            .write(path)
            .with_context(|| format!("write the ready file {}", path.display())),
        None => Ok(()),
    };
    if ready.is_ok() {
        let status = format!("serving nbd://{}", cluster.endpoints.nbd_tcp);
        crate::daemons::serve_until_signal(&status).await?;
    }
    eprintln!("basalt: shutting down (finishing in-flight requests)...");
    if let Some(path) = &args.ready_file {
        let _ = std::fs::remove_file(path);
    }
    if let Some((stop, task)) = csi {
        let _ = stop.send(());
        if let Ok(Err(e)) = task.await {
            tracing::warn!("the CSI driver stopped: {e}");
        }
    }
    cluster.stop().await?;
    ready?;
    eprintln!("basalt: stopped cleanly");
    Ok(())
}

/// The CSI driver of `up --csi-endpoint`: served until the sender fires.
type CsiTask = (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), basalt_csi::CsiError>>,
);

/// Serve the CSI driver (controller and node) for `cluster` on `endpoint`: volumes in its
/// pool, attached through its NBD listener, staged volumes recorded under the data
/// directory.
fn start_csi(args: &UpArgs, cluster: &LocalCluster, endpoint: &str) -> anyhow::Result<CsiTask> {
    let config = basalt_csi::CsiConfig {
        endpoint: basalt_csi::serve::socket_path(endpoint)?,
        mode: basalt_csi::Mode::All,
        default_pool: cluster.pool.name.clone(),
        version: basalt_node::build::info().version,
        node_id: basalt_node::hostname(),
        nbd_uri: Some(format!("nbd://{}/{{volume}}", cluster.endpoints.nbd_tcp)),
        state_dir: args.data_dir.join("csi"),
    };
    let server = basalt_csi::CsiServer::bind(config)
        .with_context(|| format!("--csi-endpoint {endpoint}"))?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let client = cluster.client();
    let task = tokio::spawn(server.run(client, async move {
        let _ = stopped.await;
    }));
    Ok((stop, task))
}

/// The banner: where everything is served, then commands to try.
fn print_banner(
    args: &UpArgs,
    pool: &PoolRecord,
    e: &Endpoints,
    tls: Option<Arc<basalt_nbd::TlsConfig>>,
) {
    let vol = e.default_volume.as_deref().unwrap_or("VOLUME");
    let scheme = match pool.ec {
        Some(ec) => format!("erasure coded {ec}"),
        None => format!("{} replicas", pool.size),
    };
    println!(
        "Basalt is up: {} OSDs, pool \"{}\" ({scheme}, {} PGs), data in {} (I/O {})",
        e.osds,
        pool.name,
        pool.pg_count,
        e.data_dir.display(),
        e.osd_io
    );
    let nbd = e.nbd_tcp;
    println!("  NBD (TCP):   nbd://{nbd}/{vol}");
    if let Some(csi) = &args.csi_endpoint {
        println!("  CSI driver:  {csi} (csi.basalt.dev: controller and node)");
    }
    println!(
        "  NBD (unix):  nbd+unix:///{vol}?socket={}",
        e.nbd_socket.display()
    );
    if let Some(tls) = &tls {
        println!("  NBD TLS:     {}", tls.describe());
    }
    if let Some(addr) = e.nvmf {
        println!(
            "  NVMe/TCP:    {addr} subsystem {}",
            basalt_nvmf::volume_nqn(vol)
        );
    }
    let control = e.control_socket.display();
    println!("  Control API: {control} (basalt volume --control {control} ls)");
    if let (Some(s3), Some(creds)) = (e.s3, &e.s3_credentials) {
        println!(
            "  S3:          http://{s3} (access key in {}, profile \"basalt\")",
            creds.display()
        );
    }
    if let Some(addr) = e.metrics {
        println!("  Metrics:     http://{addr}/metrics");
    }
    print_try(args, e, vol, tls.as_deref());
    println!("Press Ctrl-C to stop.");
    crate::daemons::flush_stdout();
}

/// The banner's "Try:" lines: client commands for what is served.
fn print_try(args: &UpArgs, e: &Endpoints, vol: &str, tls: Option<&basalt_nbd::TlsConfig>) {
    let nbd: SocketAddr = e.nbd_tcp;
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
    if let Some(addr) = e.nvmf {
        println!(
            "  nvme connect -t tcp -a {} -s {} -n {}",
            addr.ip(),
            addr.port(),
            basalt_nvmf::volume_nqn(vol)
        );
    }
    println!(
        "  fio --name=try --ioengine=nbd --uri=nbd://{nbd}/{vol} --rw=randrw --bs=4k \
         --iodepth=32 --size=256M --runtime=10 --time_based"
    );
    if let (Some(s3), Some(creds)) = (e.s3, &e.s3_credentials) {
        println!(
            "  AWS_SHARED_CREDENTIALS_FILE={} aws --profile basalt --endpoint-url \
             http://{s3} s3 mb s3://demo",
            creds.display()
        );
    }
}
