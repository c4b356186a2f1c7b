//! The multi-host daemons' flags and banners: `basalt osd`, `basalt mon`, `basalt nbd` and
//! `basalt nvmf`, each pointed at the cluster's etcd with `--meta etcd://HOST:2379`. Their
//! lifecycles are `basalt_node`'s.

use anyhow::{bail, Context};
use basalt_auth::{ClusterSecret, Credentials, Keyring};
use basalt_meta::MetaStore;
use basalt_node::metrics_http::metrics_addr;
use basalt_node::{wait_for_signal, GatewayConfig, MonitorSettings};
use basalt_proto::size::parse_size;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Where the cluster's metadata lives, and the keyring that proves who we are to its OSDs.
/// Global flags: given once on the command line, in any position (docs/cli.md).
#[derive(Args, Debug, Clone, Default)]
pub struct MetaArgs {
    /// Cluster metadata: etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE] (etcds:// for TLS)
    #[arg(long, global = true, env = "BASALT_META")]
    pub meta: Option<String>,
    /// CA certificate (PEM) that signed etcd's certificate (etcds:// URLs).
    #[arg(long, global = true, env = "BASALT_META_CA")]
    pub meta_ca: Option<PathBuf>,
    /// Client certificate (PEM) for an etcd that checks clients (with --meta-key).
    #[arg(long, global = true, env = "BASALT_META_CERT")]
    pub meta_cert: Option<PathBuf>,
    /// Key (PEM) of --meta-cert.
    #[arg(long, global = true, env = "BASALT_META_KEY")]
    pub meta_key: Option<PathBuf>,
    /// etcd user, when etcd's authentication is enabled (with --meta-password-file).
    #[arg(long, global = true, env = "BASALT_META_USER")]
    pub meta_user: Option<String>,
    /// File whose first line is the etcd user's password.
    #[arg(long, global = true, env = "BASALT_META_PASSWORD_FILE")]
    pub meta_password_file: Option<PathBuf>,
    /// Keyring file (mode 0600): the cluster secret (`basalt cluster init`) for daemons and
    /// administrators, or one client's key (`basalt auth add`).
    #[arg(long, global = true, env = "BASALT_KEYRING")]
    pub keyring: Option<PathBuf>,
    /// Data-plane TLS: a directory with the cluster CA (ca-cert.pem) and this host's
    /// certificate and key (cert.pem, key.pem). Every connection to an OSD then runs inside
    /// TLS; OSDs started with it refuse plaintext. `basalt cluster init --data-tls DIR`
    /// makes one.
    #[arg(long, global = true, env = "BASALT_DATA_TLS", value_name = "DIR")]
    pub data_tls: Option<PathBuf>,
}

impl MetaArgs {
    pub fn url(&self) -> anyhow::Result<&str> {
        self.meta.as_deref().ok_or_else(|| {
            anyhow::anyhow!("--meta etcd://HOST:2379 is required (or set BASALT_META)")
        })
    }

    /// The keyring: required wherever a multi-host cluster's OSDs are reached.
    pub fn keyring(&self) -> anyhow::Result<Keyring> {
        let Some(path) = &self.keyring else {
            bail!(
                "--keyring FILE is required for a multi-host cluster (or set BASALT_KEYRING): \
                 `basalt cluster init --meta URL --keyring FILE` makes the cluster's, \
                 `basalt auth add client.NAME` one per client"
            );
        };
        Ok(Keyring::load(path)?)
    }

    /// What this tool proves to the OSDs (inside TLS with --data-tls).
    pub fn credentials(&self) -> anyhow::Result<Credentials> {
        Ok(self
            .keyring()?
            .client_credentials()
            .with_tls(self.data_tls()?))
    }

    /// The data-plane TLS credentials, loaded and checked; None without --data-tls.
    pub fn data_tls(&self) -> anyhow::Result<Option<Arc<basalt_auth::DataTls>>> {
        self.data_tls
            .as_deref()
            .map(basalt_node::data_tls::load)
            .transpose()
    }

    /// The cluster secret, checked against the cluster's verifier (daemons, `auth add`).
    pub async fn checked_secret(&self, meta: &dyn MetaStore) -> anyhow::Result<ClusterSecret> {
        let keyring = self.keyring()?;
        let secret = keyring.secret()?.clone();
        basalt_auth::registry::check_cluster(meta, &secret)
            .await
            .with_context(|| format!("check the keyring {}", self.keyring_shown()))?;
        Ok(secret)
    }

    fn keyring_shown(&self) -> String {
        self.keyring
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }

    /// How etcd is reached: TLS and user flags.
    pub fn access(&self) -> basalt_meta::MetaAccess {
        basalt_meta::MetaAccess {
            ca: self.meta_ca.clone(),
            cert: self.meta_cert.clone(),
            key: self.meta_key.clone(),
            user: self.meta_user.clone(),
            password_file: self.meta_password_file.clone(),
        }
    }

    pub async fn connect(&self) -> anyhow::Result<Arc<dyn MetaStore>> {
        let url = self.url()?;
        basalt_meta::connect_meta_with(url, &self.access())
            .await
            .with_context(|| format!("connect to the cluster metadata at {url}"))
    }

    /// [`Self::connect`], every call timed by kind into the returned latency (for the
    /// daemon's `/metrics`).
    pub async fn connect_timed(
        &self,
    ) -> anyhow::Result<(Arc<dyn MetaStore>, Arc<basalt_meta::MetaLatency>)> {
        let latency = Arc::new(basalt_meta::MetaLatency::default());
        let meta = basalt_meta::TimedMeta::new(self.connect().await?, latency.clone());
        Ok((Arc::new(meta), latency))
    }
}

/// Settings of the monitor candidate a daemon runs.
#[derive(Args, Debug, Clone)]
pub struct MonArgs {
    /// Seconds an OSD may stay down before it is marked out and its data re-replicated.
    #[arg(long, default_value_t = 600)]
    pub out_after: u64,
    /// TTL in seconds of the monitor role's lease.
    #[arg(long, default_value_t = 3)]
    pub mon_lease_ttl: u64,
    /// How many OSDs must report an OSD unreachable before the monitor marks it down ahead
    /// of its liveness lease (fewer when fewer other OSDs are up).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    pub min_down_reporters: u64,
    /// Milliseconds an OSD must stay reported by enough peers before it is marked down: the
    /// reports of both sides of a partition arrive within it, so the right side goes down.
    #[arg(long, default_value_t = 300, value_name = "MS")]
    pub down_report_settle_ms: u64,
}

/// How an OSD watches the peers of its PGs (docs/design.md, "Failure detection by peers").
#[derive(Args, Debug, Clone)]
pub struct HeartbeatArgs {
    /// Milliseconds between two heartbeats to each peer.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    pub heartbeat_interval_ms: u64,
    /// Report a peer to the monitor once it has not answered for this many milliseconds
    /// (a refused connection is reported at once). Larger tolerates more network jitter and
    /// longer stalls; smaller fails over sooner.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub heartbeat_grace_ms: u64,
    /// How long one answered heartbeat lets this OSD serve as a primary, in milliseconds;
    /// also how long a peer waits before taking over from a primary reported down. At least
    /// three intervals, at most the grace.
    #[arg(long, default_value_t = 600, value_name = "MS")]
    pub peer_lease_ms: u64,
}

impl HeartbeatArgs {
    fn config(&self) -> anyhow::Result<basalt_osd::HeartbeatConfig> {
        let ms = std::time::Duration::from_millis;
        let config = basalt_osd::HeartbeatConfig {
            interval: ms(self.heartbeat_interval_ms),
            grace: ms(self.heartbeat_grace_ms),
            peer_lease: ms(self.peer_lease_ms),
        };
        config.check().map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(config)
    }
}

/// `basalt osd`: one storage daemon.
#[derive(Args, Debug)]
pub struct OsdArgs {
    /// The global --meta/--keyring flags, filled in by `main`.
    #[arg(skip)]
    pub meta: MetaArgs,
    /// Directory of this OSD: its store file (store.dat) and identity (osd.json).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Keep the store on this block device instead of DATA/store.dat; the device must hold
    /// a store made by `basalt disk prepare DEV` (its size and object size are the store's:
    /// --capacity and --object-size do not apply). The identity stays in --data.
    #[arg(long, value_name = "DEV")]
    pub device: Option<PathBuf>,
    /// Leave a new store file sparse: its capacity is a ceiling, not a reservation (test
    /// clusters sharing one disk). By default the whole file is allocated at first start, and
    /// a filesystem without room for it is refused.
    #[arg(long, conflicts_with = "device")]
    pub sparse: bool,
    /// Data-plane address to listen on; others reach the OSD there, so give a routable IP.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// OSD id (first start only; by default the next free id is taken).
    #[arg(long)]
    pub id: Option<u32>,
    /// Failure-domain name of this machine [default: the hostname].
    #[arg(long)]
    pub host: Option<String>,
    /// Where this machine stands above its host, for pools with failure domain rack or
    /// zone: zone=NAME,rack=NAME (either may be left out). Every OSD of a host gives the
    /// same one.
    #[arg(long, value_name = "zone=Z,rack=R")]
    pub location: Option<String>,
    /// The store's device class (nvme, ssd, hdd, or a name of your own), for pools with
    /// --device-class [default: detected from the device, or the disk under --data].
    #[arg(long, value_name = "CLASS")]
    pub device_class: Option<String>,
    /// Capacity of the store file, e.g. 100G (first start only; allocated in full unless
    /// --sparse).
    #[arg(long, default_value = "8G")]
    pub capacity: String,
    /// Object size of the store; must equal the object size of the pools (first start).
    #[arg(long, default_value = "128K")]
    pub object_size: String,
    /// WAL size of the store, e.g. 64M (first start only) [default: an eighth of --capacity,
    /// 4 MiB to 256 MiB]. A smaller WAL checkpoints more often; the WAL is allocated even
    /// with --sparse. A device's WAL is set by `basalt disk prepare --wal-size`.
    #[arg(long, value_name = "SIZE", conflicts_with = "device")]
    pub wal_size: Option<String>,
    /// Liveness lease TTL in seconds: how soon a dead OSD is noticed (failover time).
    #[arg(long, default_value_t = 3)]
    pub lease_ttl: u64,
    /// Background recovery rate when clients are idle, per second (e.g. 256M).
    #[arg(long, default_value = "256M")]
    pub recovery_rate: String,
    /// Background recovery rate while clients are active, per second.
    #[arg(long, default_value = "32M")]
    pub recovery_rate_busy: String,
    /// Seconds between scans for stray copies (of PGs this OSD left, once they are clean
    /// elsewhere), which are then deleted to free their space; 0: never.
    #[arg(long, default_value_t = 30)]
    pub stray_scan_secs: u64,
    /// Report an operation in flight longer than this many milliseconds as a slow op (a
    /// warn line, `basalt_osd_slow_ops` and `basalt status --watch`).
    #[arg(long, default_value_t = basalt_osd::slow::SLOW_OP_THRESHOLD_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub slow_op_ms: u64,
    /// Do not run a monitor candidate in this process.
    #[arg(long)]
    pub no_monitor: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics [default: 127.0.0.1 and the --listen
    /// port + 1000; give an IP:PORT to let a Prometheus server elsewhere scrape it; "off"
    /// for none, which also stops recording latency histograms].
    #[arg(long)]
    pub metrics_listen: Option<String>,
    #[command(flatten)]
    pub io: IoArgs,
    #[command(flatten)]
    pub heartbeat: HeartbeatArgs,
    #[command(flatten)]
    pub mon: MonArgs,
}

/// How an OSD's store does its I/O (`basalt osd`, `basalt up`).
#[derive(Args, Clone, Debug)]
pub struct IoArgs {
    /// Who runs the store's reads, writes and syncs: "uring" (one io_uring per store,
    /// batched submission; where the kernel refuses io_uring the OSD falls back to threads
    /// and says so), "threads" (blocking syscalls on 8 dedicated threads), or "inline"
    /// (the OSD's own runtime threads: only with --buffered-io, for comparisons).
    #[arg(long, default_value = "uring", value_name = "ENGINE")]
    pub io_engine: String,
    /// Go through the page cache instead of O_DIRECT. By default the store bypasses it
    /// (no double caching, no write-back stalls); filesystems that refuse O_DIRECT, such as
    /// tmpfs, run buffered anyway. The mode in use is in the startup line, `osd ls` and the
    /// basalt_osd_store_direct_io metric.
    #[arg(long)]
    pub buffered_io: bool,
}

impl IoArgs {
    /// The same choice as `basalt up` flags (checked first).
    pub fn up_args(&self) -> anyhow::Result<Vec<String>> {
        self.options()?;
        let mut args = vec!["--io-engine".to_string(), self.io_engine.clone()];
        if self.buffered_io {
            args.push("--buffered-io".into());
        }
        Ok(args)
    }

    /// The flags as the store's I/O options.
    pub fn options(&self) -> anyhow::Result<basalt_store::IoOptions> {
        basalt_store::IoOptions::for_daemon(&self.io_engine, !self.buffered_io)
            .map_err(|e| anyhow::anyhow!("--io-engine {}: {e}", self.io_engine))
    }
}

impl MonArgs {
    /// Does any setting differ from its default?
    fn customised(&self) -> bool {
        self.out_after != 600
            || self.mon_lease_ttl != 3
            || self.min_down_reporters != 2
            || self.down_report_settle_ms != 300
    }

    fn settings(&self) -> MonitorSettings {
        MonitorSettings {
            out_after_secs: self.out_after,
            lease_ttl_secs: self.mon_lease_ttl,
            min_down_reporters: self.min_down_reporters as usize,
            report_settle_ms: self.down_report_settle_ms,
        }
    }
}

/// `basalt osd`'s flags, checked, as the daemon's config.
fn osd_config(args: &OsdArgs) -> anyhow::Result<basalt_node::OsdDaemonConfig> {
    let Some(data) = args.data.clone() else {
        bail!("--data DIR is required: the directory of this OSD's store");
    };
    let Some(listen) = args.listen else {
        bail!("--listen IP:PORT is required: the data-plane address peers and clients use");
    };
    if listen.ip().is_unspecified() {
        bail!(
            "--listen {listen}: give the IP other hosts reach this OSD at, not {}",
            listen.ip()
        );
    }
    let metrics = metrics_addr(args.metrics_listen.as_deref(), Some(listen))?;
    if metrics.is_none() {
        // Before any I/O: nothing will read the histograms (docs/metrics.md, "Off").
        basalt_metrics::disable_latency();
    }
    let io = args.io.options()?;
    if args.no_monitor && args.mon.customised() {
        bail!(
            "--no-monitor with monitor settings (--out-after, --mon-lease-ttl, \
             --min-down-reporters, --down-report-settle-ms): this process runs no monitor to apply them; give them to \
             `basalt mon` or drop --no-monitor"
        );
    }
    if let (Some(device), true) = (&args.device, args.io.buffered_io) {
        bail!(
            "--buffered-io with --device {}: a raw device is always opened O_DIRECT (there is \
             no page cache to go through, and the inline engine needs buffered I/O); drop \
             --buffered-io",
            device.display()
        );
    }
    Ok(basalt_node::OsdDaemonConfig {
        data,
        device: args.device.clone(),
        sparse: args.sparse,
        listen,
        id: args.id,
        host: args.host.clone().unwrap_or_else(basalt_node::hostname),
        location: basalt_placement::parse_location(args.location.as_deref().unwrap_or(""))
            .map_err(|e| anyhow::anyhow!("--location: {e}"))?,
        device_class: match &args.device_class {
            Some(class) => {
                basalt_placement::check_device_class(class)
                    .map_err(|e| anyhow::anyhow!("--device-class: {e}"))?;
                Some(class.clone())
            }
            None => None,
        },
        capacity_bytes: parse_size(&args.capacity)?,
        object_size_bytes: parse_size(&args.object_size)? as u32,
        wal_bytes: parse_size_or_zero(args.wal_size.as_deref())?,
        lease_ttl_secs: args.lease_ttl,
        recovery: basalt_osd::RecoveryConfig {
            idle_bytes_per_sec: parse_size(&args.recovery_rate)?,
            busy_bytes_per_sec: parse_size(&args.recovery_rate_busy)?,
        },
        stray_scan: (args.stray_scan_secs > 0)
            .then(|| std::time::Duration::from_secs(args.stray_scan_secs)),
        slow_op_ms: args.slow_op_ms,
        monitor: (!args.no_monitor).then(|| args.mon.settings()),
        metrics,
        data_tls: args.meta.data_tls()?,
        io,
        heartbeat: Some(args.heartbeat.config()?),
    })
}

pub async fn run_osd(args: OsdArgs) -> anyhow::Result<()> {
    let config = osd_config(&args)?;
    let (meta, meta_latency) = args.meta.connect_timed().await?;
    let secret = args.meta.checked_secret(meta.as_ref()).await?;
    let mut place = basalt_placement::format_location(&config.location);
    if !place.is_empty() {
        place.insert_str(0, ", ");
    }
    let host = config.host.clone();
    let osd = basalt_node::OsdDaemon::start(config, meta, meta_latency, secret).await?;
    let id = osd.id;
    println!(
        "osd.{id} serving on {} (host {host}{place}, class {}, incarnation {:x}, store {}, io \
         {}{})",
        osd.addr,
        osd.class,
        osd.incarnation,
        osd.store.display(),
        osd.io_mode,
        metrics_suffix(osd.metrics)
    );
    serve_until_signal(&format!("osd.{id} serving on {}", osd.addr)).await?;
    eprintln!("osd.{id}: stopping");
    osd.stop().await?;
    eprintln!("osd.{id}: stopped cleanly");
    Ok(())
}

/// ", metrics http://ADDR/metrics" for banners, or nothing.
fn metrics_suffix(metrics: Option<SocketAddr>) -> String {
    metrics
        .map(|addr| format!(", metrics http://{addr}/metrics"))
        .unwrap_or_default()
}

pub(crate) fn flush_stdout() {
    use std::io::Write;
    let _ = std::io::stdout().flush();
}

/// A daemon serves: flush its banner, tell systemd it is ready (`status` is what
/// `systemctl status` shows), wait for SIGINT/SIGTERM, and tell systemd it is stopping.
pub(crate) async fn serve_until_signal(status: &str) -> anyhow::Result<()> {
    flush_stdout();
    basalt_node::systemd::ready(status);
    wait_for_signal().await?;
    basalt_node::systemd::stopping();
    Ok(())
}

/// `basalt mon`: a monitor candidate on its own.
#[derive(Args, Debug)]
pub struct MonCmdArgs {
    /// The global --meta/--keyring flags, filled in by `main`.
    #[arg(skip)]
    pub meta: MetaArgs,
    #[command(flatten)]
    pub mon: MonArgs,
}

pub async fn run_mon(args: MonCmdArgs) -> anyhow::Result<()> {
    let meta = args.meta.connect().await?;
    // The monitor reads and writes metadata only, but a cluster's daemons all start with
    // its keyring: a mistyped etcd address or a foreign cluster is caught here.
    args.meta.checked_secret(meta.as_ref()).await?;
    let holder = format!("mon on {}", basalt_node::hostname());
    let monitor = basalt_node::Monitor::spawn(meta, holder, args.mon.settings());
    println!("monitor candidate running (it takes the role when no one holds it)");
    serve_until_signal("monitor candidate running").await?;
    monitor.stop().await;
    Ok(())
}

/// TLS of an NBD server (`basalt up`, `basalt nbd`): the flags only; loading and checking
/// the credentials is `basalt_nbd::TlsConfig`'s.
#[derive(Args, Debug, Clone)]
pub struct NbdTlsArgs {
    /// Offer TLS (NBD_OPT_STARTTLS) with the x509 certificates in DIR, laid out as qemu's
    /// tls-creds-x509: server-cert.pem, server-key.pem (and ca-cert.pem for
    /// --nbd-tls-verify-peer).
    #[arg(long, value_name = "DIR", conflicts_with = "nbd_tls_psk")]
    pub nbd_tls_cert: Option<PathBuf>,
    /// Offer TLS with pre-shared keys: FILE holds USER:HEXKEY lines (the keys.psk of qemu's
    /// tls-creds-psk and of nbdkit).
    #[arg(long, value_name = "FILE")]
    pub nbd_tls_psk: Option<PathBuf>,
    /// Require client certificates signed by DIR/ca-cert.pem (qemu's verify-peer).
    #[arg(long, requires = "nbd_tls_cert")]
    pub nbd_tls_verify_peer: bool,
    /// Refuse NBD clients on TCP that do not start TLS (NBD's FORCEDTLS mode). The unix
    /// socket, guarded by its file permissions, offers TLS but does not require it.
    #[arg(long)]
    pub nbd_tls_required: bool,
}

impl NbdTlsArgs {
    /// Load and check the credentials; `None` when TLS is off.
    pub fn load(&self) -> anyhow::Result<Option<Arc<basalt_nbd::TlsConfig>>> {
        use basalt_nbd::TlsConfig;
        let config = match (&self.nbd_tls_cert, &self.nbd_tls_psk) {
            (Some(dir), None) => TlsConfig::x509_dir(dir, self.nbd_tls_verify_peer)
                .with_context(|| format!("--nbd-tls-cert {}", dir.display()))?,
            (None, Some(file)) => TlsConfig::psk_file(file)
                .with_context(|| format!("--nbd-tls-psk {}", file.display()))?,
            (None, None) if self.nbd_tls_required => bail!(
                "--nbd-tls-required needs credentials: --nbd-tls-cert DIR or --nbd-tls-psk FILE"
            ),
            (None, None) => return Ok(None),
            (Some(_), Some(_)) => bail!("give --nbd-tls-cert or --nbd-tls-psk, not both"),
        };
        Ok(Some(Arc::new(config.required(self.nbd_tls_required))))
    }
}

/// `basalt nbd`: an NBD gateway serving every volume under its name.
#[derive(Args, Debug)]
pub struct NbdArgs {
    /// The global --meta/--keyring flags, filled in by `main`.
    #[arg(skip)]
    pub meta: MetaArgs,
    /// NBD listen address (TCP).
    #[arg(long, default_value = "127.0.0.1:10809")]
    pub listen: SocketAddr,
    /// Also serve NBD on this unix socket.
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics [default: 127.0.0.1 and the --listen
    /// port + 1000; give an IP:PORT to let a Prometheus server elsewhere scrape it; "off"
    /// for none, which also stops recording latency and counters].
    #[arg(long)]
    pub metrics_listen: Option<String>,
    /// Export per-volume metrics for the first N volumes opened (0: totals only).
    #[arg(long, default_value_t = 0)]
    pub metrics_per_volume: usize,
    /// Seconds an I/O keeps being retried while its PG cannot serve (failover, peering,
    /// fewer than min_size OSDs up) before the client gets an error (EIO); 0: wait for ever,
    /// as a hard-mounted disk does, so a VM stalls rather than sees errors. Waits longer
    /// than 30 s are logged; `basalt status` names the PGs and what brings them back.
    #[arg(long, default_value_t = 0, value_name = "SECONDS")]
    pub io_timeout: u64,
    #[command(flatten)]
    pub reads: ReadPolicyArgs,
    #[command(flatten)]
    pub tls: NbdTlsArgs,
}

/// Where a gateway's reads go.
#[derive(Args, Debug)]
pub struct ReadPolicyArgs {
    /// Where reads of replicated volumes go: "localize" reads from the replica on this
    /// gateway's host when the primary is elsewhere (that replica serves only while it is
    /// provably current, else the primary answers); "primary" always asks the primary
    /// [default: localize when the map has an OSD on this host, else primary].
    #[arg(long, value_name = "POLICY", value_parser = ["primary", "localize"])]
    pub read_policy: Option<String>,
    /// The host this gateway runs on, as its OSDs name it (`basalt osd --host`) [default:
    /// this machine's name].
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
}

#[derive(Args, Debug)]
pub struct NvmfArgs {
    /// The global --meta/--keyring flags, filled in by `main`.
    #[arg(skip)]
    pub meta: MetaArgs,
    /// NVMe/TCP listen address (4420 is the port hosts try by default).
    #[arg(long, default_value = "127.0.0.1:4420")]
    pub listen: SocketAddr,
    /// Serve Prometheus metrics at http://ADDR/metrics [default: 127.0.0.1 and the --listen
    /// port + 1000; "off" for none, which also stops recording latency and counters].
    #[arg(long)]
    pub metrics_listen: Option<String>,
    /// Export per-volume metrics for the first N volumes opened (0: totals only).
    #[arg(long, default_value_t = 0)]
    pub metrics_per_volume: usize,
    /// Seconds an I/O keeps being retried while its PG cannot serve (failover, peering,
    /// fewer than min_size OSDs up) before the client gets an error (EIO); 0: wait for ever,
    /// as a hard-mounted disk does, so a VM stalls rather than sees errors. Waits longer
    /// than 30 s are logged; `basalt status` names the PGs and what brings them back.
    #[arg(long, default_value_t = 0, value_name = "SECONDS")]
    pub io_timeout: u64,
    #[command(flatten)]
    pub reads: ReadPolicyArgs,
}

impl MetaArgs {
    /// What a gateway listening on `listen` is started with.
    async fn gateway_config(
        &self,
        listen: SocketAddr,
        metrics_listen: Option<String>,
        metrics_per_volume: usize,
        io_timeout_secs: u64,
        reads: &ReadPolicyArgs,
    ) -> anyhow::Result<GatewayConfig> {
        let credentials = self.credentials()?;
        let (meta, meta_latency) = self.connect_timed().await?;
        let host = reads
            .host
            .clone()
            .unwrap_or_else(basalt_node::osd_daemon::hostname);
        let read_policy = match reads.read_policy.as_deref() {
            None => None,
            Some("primary") => Some(basalt_client::ReadPolicy::Primary),
            Some(_) => Some(basalt_client::ReadPolicy::Localize { host: host.clone() }),
        };
        Ok(GatewayConfig {
            read_policy,
            host,
            meta,
            meta_latency,
            credentials,
            listen,
            metrics_listen,
            metrics_per_volume,
            io_timeout: (io_timeout_secs > 0)
                .then(|| std::time::Duration::from_secs(io_timeout_secs)),
        })
    }
}

pub async fn run_nvmf(args: NvmfArgs) -> anyhow::Result<()> {
    let config = args
        .meta
        .gateway_config(
            args.listen,
            args.metrics_listen,
            args.metrics_per_volume,
            args.io_timeout,
            &args.reads,
        )
        .await?;
    let gateway = basalt_node::NvmfGateway::start(config).await?;
    println!(
        "NVMe/TCP gateway serving on {}: subsystem {} per volume, discovery {}{}",
        gateway.addr,
        basalt_nvmf::volume_nqn("VOLUME"),
        basalt_nvmf::DISCOVERY_NQN,
        metrics_suffix(gateway.metrics)
    );
    serve_until_signal(&format!("NVMe/TCP gateway serving on {}", gateway.addr)).await?;
    gateway.stop().await;
    Ok(())
}

pub async fn run_nbd(args: NbdArgs) -> anyhow::Result<()> {
    let tls = args.tls.load()?;
    let tls_line = tls.as_ref().map(|t| format!("; TLS: {}", t.describe()));
    let config = args
        .meta
        .gateway_config(
            args.listen,
            args.metrics_listen,
            args.metrics_per_volume,
            args.io_timeout,
            &args.reads,
        )
        .await?;
    let gateway = basalt_node::NbdGateway::start(config, args.socket, tls).await?;
    println!(
        "NBD gateway serving on nbd://{}/VOLUME (every volume under its name){}{}",
        gateway.addr,
        metrics_suffix(gateway.metrics),
        tls_line.unwrap_or_default()
    );
    serve_until_signal(&format!("NBD gateway serving on {}", gateway.addr)).await?;
    gateway.stop().await;
    Ok(())
}

/// An optional size flag: its bytes, or 0 (the callee's own default) when not given.
pub(crate) fn parse_size_or_zero(text: Option<&str>) -> anyhow::Result<u64> {
    Ok(text.map(parse_size).transpose()?.unwrap_or(0))
}
