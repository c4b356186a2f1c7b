//! `basalt volume ...`: volume management through the control API.

use crate::control::{Request, Response};
use crate::daemons::MetaArgs;
use crate::progress::{Meter, Unit};
use basalt_bench::environment::utc_from_unix;
use basalt_client::{parse_snapshot_spec, VolumeInfo};
use basalt_proto::size::{human_bytes, parse_size};
use clap::{Args, Subcommand};
use std::path::PathBuf;

/// Where volume requests go: the control API of `basalt up`, or a cluster's metadata.
pub struct VolumeApi {
    control: PathBuf,
    pub(crate) meta: MetaArgs,
    pool: String,
    /// Print JSON instead of text (the global --json).
    pub(crate) json: bool,
    /// How long a change may take to become visible (None: --no-wait).
    pub(crate) wait: Option<std::time::Duration>,
}

impl VolumeApi {
    pub fn new(global: &crate::global::GlobalArgs, pool: String) -> Self {
        Self {
            control: global.control.clone(),
            meta: global.meta.clone(),
            pool,
            json: global.json,
            wait: global.wait(),
        }
    }

    /// Every pool's name, by id.
    pub(crate) async fn pool_names(&self) -> anyhow::Result<PoolNames> {
        let pools = match self.meta.meta {
            Some(_) => {
                basalt_client::pools::list_pools(self.meta.connect().await?.as_ref()).await?
            }
            None => self.call(Request::PoolLs).await?.pools.unwrap_or_default(),
        };
        Ok(pools.into_iter().map(|p| (p.id, p.name)).collect())
    }

    pub(crate) async fn call(&self, req: Request) -> anyhow::Result<Response> {
        self.call_with_progress(req, |_, _| {}).await
    }

    /// Send `req`; a long operation reports `progress(done, total)` while it runs. With
    /// --meta the request runs here, on the cluster opened from its metadata.
    pub(crate) async fn call_with_progress(
        &self,
        req: Request,
        progress: impl Fn(u64, u64) + Send + Sync,
    ) -> anyhow::Result<Response> {
        if self.meta.meta.is_none() {
            return Ok(crate::control::call_with_progress(&self.control, &req, progress).await?);
        }
        let cluster = crate::admin::open_cluster(&self.meta).await?;
        let wait = self.wait.unwrap_or_default();
        Ok(basalt_control::run_local(&cluster, &self.pool, wait, req, progress).await?)
    }
}

#[derive(Subcommand, Debug)]
pub enum VolumeCommand {
    /// Per-volume IOPS, MiB/s and latency, every --interval seconds: from `basalt up`
    /// through its control API, or from gateways' metrics (--endpoint).
    ///
    /// Examples:
    ///   basalt volume iostat
    ///   basalt volume iostat --endpoint 10.0.0.5:11809 --interval 2    # a `basalt nbd`
    #[command(verbatim_doc_comment)]
    Iostat(crate::iostat::IostatArgs),
    /// Create a volume; it is exported over NBD under its name at once.
    ///
    /// With --from-image the volume is a clone of the image, made in O(1) at any size: it
    /// reads the image until it writes its own data. A pool created a moment ago is waited
    /// for until the cluster map has it (up to --wait-timeout; 10 s through `basalt up`).
    ///
    /// Examples:
    ///   basalt volume create db1 --size 10G
    ///   basalt volume create vm1-disk --from-image debian-12
    ///   basalt volume create logs --size 1T --pool cold --meta etcd://10.0.0.1:2379
    #[command(verbatim_doc_comment)]
    Create {
        name: String,
        /// Size with an optional K, M, G or T suffix (binary units); a multiple of 4096.
        #[arg(
            long,
            short,
            required_unless_present = "from_image",
            conflicts_with = "from_image"
        )]
        size: Option<String>,
        /// Make the volume a clone of this image (its size is the image's).
        #[arg(long, value_name = "IMAGE")]
        from_image: Option<String>,
    },
    /// List volumes: name, size, space used, pool, snapshots, creation time (UTC), parent.
    ///
    /// Examples:
    ///   basalt volume ls
    ///   basalt volume ls --json
    #[command(verbatim_doc_comment)]
    Ls,
    /// Show one volume: size, pool, creation time (UTC), parent, space used, snapshots.
    ///
    /// Examples:
    ///   basalt volume info db1
    ///   basalt volume info db1 --json
    #[command(verbatim_doc_comment)]
    Info { name: String },
    /// Change a volume's size. Shrinking discards the data past the new end.
    ///
    /// Connected NBD clients keep the size they negotiated; reconnect to see the new one.
    /// A volume with snapshots, or a clone, can grow but not shrink.
    ///
    /// Examples:
    ///   basalt volume resize db1 20G
    ///   basalt volume resize db1 5G --allow-shrink
    #[command(verbatim_doc_comment)]
    Resize {
        name: String,
        /// New size, e.g. 20G.
        size: String,
        /// Allow a smaller size: the data past the new end is discarded for good.
        #[arg(long)]
        allow_shrink: bool,
    },
    /// Remove a volume and its data, snapshots included.
    ///
    /// Refused while another volume is a clone of one of its snapshots, and while a
    /// gateway (`basalt nbd`, `basalt up`) has it open, unless --force.
    ///
    /// Example:
    ///   basalt volume rm db1
    #[command(verbatim_doc_comment)]
    Rm {
        name: String,
        /// Remove it even while gateways have it open (their clients' I/O then fails).
        #[arg(long)]
        force: bool,
    },
    /// Take (`snapshot VOL@SNAP`), list (`snapshot ls VOL`) or remove (`snapshot rm VOL@SNAP`)
    /// snapshots.
    ///
    /// A snapshot is crash-consistent: it holds every write acknowledged before the command
    /// returns and none that starts after. It takes the same time at any volume size
    /// (metadata only). A snapshot is exported read-only over NBD as `VOL@SNAP`.
    ///
    /// Examples:
    ///   basalt volume snapshot db1@before-upgrade
    ///   basalt volume snapshot ls db1
    ///   basalt volume snapshot rm db1@before-upgrade
    #[command(verbatim_doc_comment)]
    Snapshot(SnapshotArgs),
    /// Roll a volume back to one of its snapshots: it then reads exactly as the snapshot
    /// (size included); what was written since is dropped. O(1).
    ///
    /// Stop the volume's users first: they see the old contents vanish under them.
    ///
    /// Example:
    ///   basalt volume rollback db1@before-upgrade
    #[command(verbatim_doc_comment)]
    Rollback {
        /// The snapshot to go back to, VOLUME@SNAPSHOT.
        snapshot: String,
    },
    /// Make a clone independent of its parent snapshot: copy every object it still reads
    /// from the parent into it (in the background of its I/O, with progress), then drop
    /// the link. Afterwards the parent snapshot can be removed.
    ///
    /// Example:
    ///   basalt volume flatten vm1-disk
    #[command(verbatim_doc_comment)]
    Flatten { name: String },
    /// Make a new volume from a snapshot, in O(1): it reads the snapshot's data until it
    /// writes its own (copy-on-write, per object).
    ///
    /// Example:
    ///   basalt volume clone golden@v1 vm1-disk
    #[command(verbatim_doc_comment)]
    Clone {
        /// The snapshot to clone, VOLUME@SNAPSHOT.
        snapshot: String,
        /// Name of the new volume.
        new: String,
    },
    /// Show, hand over or break a volume's writer lock.
    ///
    /// A client that opens a volume for writing through a gateway (`basalt nbd`, `basalt
    /// nvmf`, `basalt up`) holds its writer lock: another client's writable open is refused
    /// with the holder named. Connections of one client (one NBD address, one NVMe host
    /// NQN) share it. The lock passes on when the holder disconnects; when its gateway dies
    /// (its lease expires) the next client takes it and fences the old holder off first.
    ///
    /// Examples:
    ///   basalt volume lock show vm1-disk
    ///   basalt volume lock handover vm1-disk --window 2m    # before a live migration
    ///   basalt volume lock break vm1-disk                   # the holder is stuck
    #[command(verbatim_doc_comment)]
    Lock {
        #[command(subcommand)]
        command: LockCommand,
    },
    /// Allow NVMe/TCP hosts (by host NQN) to attach a volume; with no NQN, show the list.
    ///
    /// A volume starts with an empty list: any host may attach it. Once a host is named,
    /// the NVMe/TCP gateway refuses every other host's connect (Connect Invalid Host). A
    /// host's NQN is in its /etc/nvme/hostnqn. NBD has no host identity: restrict NBD by
    /// network and TLS (docs/operations.md).
    ///
    /// Examples:
    ///   basalt volume allow db1 nqn.2014-08.org.nvmexpress:uuid:5c1e…
    ///   basalt volume allow db1
    #[command(verbatim_doc_comment)]
    Allow {
        name: String,
        /// Host NQNs to add.
        hosts: Vec<String>,
    },
    /// Drop NVMe/TCP hosts from a volume's access list (an emptied list admits any host).
    ///
    /// Example:
    ///   basalt volume deny db1 nqn.2014-08.org.nvmexpress:uuid:5c1e…
    #[command(verbatim_doc_comment)]
    Deny {
        name: String,
        /// Host NQNs to drop.
        #[arg(required = true)]
        hosts: Vec<String>,
    },
    /// Show where a byte of a volume lives: its object, PG, acting set and primary (JSON).
    ///
    /// Needs --meta (a multi-host cluster's metadata).
    Locate {
        name: String,
        /// Byte offset in the volume.
        offset: u64,
    },
}

/// `snapshot VOL@SNAP`, or a subcommand. The global flags may stand between `snapshot` and
/// its subcommand, so a flag here does not rule the subcommand out: the argument does.
#[derive(Args, Debug)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    command: Option<SnapshotCommand>,
    /// The snapshot to take, VOLUME@SNAPSHOT.
    spec: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum LockCommand {
    /// Who holds the lock, since when, and whether their gateway is alive.
    Show { name: String },
    /// Let one more client take the lock beside its holder for a while: the destination of
    /// a live migration (docs/platforms.md). The window closes at its first join.
    Handover {
        name: String,
        /// How long the window stays open: 90s, 5m (at most 1h).
        #[arg(long, default_value = "60s", value_parser = crate::settings_cmd::parse_duration)]
        window: u64,
    },
    /// Take the lock from its holders and fence them off: their writes to the volume are
    /// refused from now on (their clients see I/O errors). For a holder that is stuck.
    Break { name: String },
}

#[derive(Subcommand, Debug)]
pub enum SnapshotCommand {
    /// Remove a snapshot. Refused while clones depend on it (named in the message). What
    /// later snapshots or the volume still read from it is copied into them first.
    Rm {
        /// The snapshot, VOLUME@SNAPSHOT.
        snapshot: String,
    },
    /// List a volume's snapshots, oldest first.
    Ls { volume: String },
}

/// Print `value` as JSON with `--json`, else as `human` shows it.
pub(crate) fn print_json_or<T: serde::Serialize>(
    json: bool,
    value: &T,
    human: impl FnOnce(&T),
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        human(value);
    }
    Ok(())
}

/// Progress on stderr of a long operation over objects (see [`crate::progress`]).
fn object_progress(what: &str) -> impl Fn(u64, u64) + Send + Sync {
    Meter::new(what, Unit::Count("objects")).reporter()
}

/// Pool names by id (from the metadata, or from `basalt up`'s control API).
type PoolNames = std::collections::BTreeMap<basalt_proto::PoolId, String>;

/// The name of pool `id` ("#ID" when it has none: a pool removed since).
fn pool_name(pools: &PoolNames, id: basalt_proto::PoolId) -> String {
    pools.get(&id).cloned().unwrap_or_else(|| format!("#{id}"))
}

/// A volume as `--json` shows it (docs/cli.md): its record, plus `pool_name`,
/// `created_utc` and `usage` (null where not measured).
fn volume_json(
    v: &VolumeInfo,
    usage: Option<&basalt_client::VolumeUsage>,
    pools: &PoolNames,
) -> serde_json::Value {
    let mut out = serde_json::to_value(v).expect("a volume record serialises");
    out["pool_name"] = pool_name(pools, v.pool).into();
    out["created_utc"] = utc_from_unix(v.created).into();
    out["usage"] = serde_json::to_value(usage).expect("usage serialises");
    out
}

/// Print `v` as `--json` shows a volume.
async fn print_volume_json(
    target: &VolumeApi,
    v: &VolumeInfo,
    usage: Option<&basalt_client::VolumeUsage>,
) -> anyhow::Result<()> {
    let pools = target.pool_names().await?;
    let out = volume_json(v, usage, &pools);
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

fn print_info(v: &VolumeInfo, usage: Option<&basalt_client::VolumeUsage>, pools: &PoolNames) {
    println!("name:        {}", v.name);
    println!("id:          {:#x} (head layer {})", v.id, v.id as u16);
    println!("size:        {} ({} bytes)", human_bytes(v.size), v.size);
    println!("pool:        {} (id {})", pool_name(pools, v.pool), v.pool);
    println!("object size: {}", human_bytes(v.object_size as u64));
    println!("created:     {} (UTC)", utc_from_unix(v.created));
    match &v.parent {
        Some(p) => println!("parent:      {p} (layer {:#x})", p.inode),
        None => println!("parent:      none"),
    }
    if let Some(u) = usage {
        println!(
            "used:        {} in its own layers (head {}, snapshots {}); removing it frees that",
            human_bytes(u.total_bytes),
            human_bytes(u.head.bytes),
            human_bytes(u.total_bytes - u.head.bytes)
        );
    }
    if !v.snapshots.is_empty() {
        println!("snapshots:   {}", v.snapshots.len());
        print_snapshots(v, usage);
    }
}

fn print_snapshots(v: &VolumeInfo, usage: Option<&basalt_client::VolumeUsage>) {
    println!(
        "  {:<24} {:>10} {:>10} {:>6}  CREATED",
        "SNAPSHOT", "SIZE", "USED", "LAYER"
    );
    for (i, s) in v.snapshots.iter().enumerate() {
        let used = usage
            .and_then(|u| u.snapshots.get(i))
            .map(|(_, l)| human_bytes(l.bytes))
            .unwrap_or_else(|| "-".into());
        println!(
            "  {:<24} {:>10} {:>10} {:>6}  {}{}",
            s.name,
            human_bytes(s.size),
            used,
            s.inode as u16,
            utc_from_unix(s.created),
            if s.removing {
                "  (being removed)"
            } else if basalt_client::is_fence_snapshot(&s.name) {
                "  (writer-lock fence: the fenced writer's last state)"
            } else {
                ""
            }
        );
    }
}

pub async fn run(target: VolumeApi, command: VolumeCommand) -> anyhow::Result<()> {
    let target = &target;
    match command {
        VolumeCommand::Iostat(args) => crate::iostat::run(target, args).await,
        VolumeCommand::Create {
            name,
            size,
            from_image,
        } => create(target, name, size, from_image).await,
        VolumeCommand::Ls => list(target).await,
        VolumeCommand::Info { name } => info(target, name).await,
        VolumeCommand::Resize {
            name,
            size,
            allow_shrink,
        } => resize(target, name, size, allow_shrink).await,
        VolumeCommand::Locate { name, offset } => locate(target, name, offset).await,
        VolumeCommand::Snapshot(SnapshotArgs { command, spec }) => match command {
            Some(SnapshotCommand::Ls { volume }) => snapshot_ls(target, volume).await,
            Some(SnapshotCommand::Rm { snapshot }) => snapshot_rm(target, snapshot).await,
            None => snapshot_take(target, spec).await,
        },
        VolumeCommand::Rollback { snapshot } => rollback(target, snapshot).await,
        VolumeCommand::Flatten { name } => flatten(target, name).await,
        VolumeCommand::Clone { snapshot, new } => clone(target, snapshot, new).await,
        VolumeCommand::Rm { name, force } => remove(target, name, force).await,
        VolumeCommand::Lock { command } => lock(target, command).await,
        VolumeCommand::Allow { name, hosts } => access(target, name, hosts, Vec::new()).await,
        VolumeCommand::Deny { name, hosts } => access(target, name, Vec::new(), hosts).await,
    }
}

/// `volume lock show|handover|break`.
async fn lock(target: &VolumeApi, command: LockCommand) -> anyhow::Result<()> {
    use basalt_control::LockAction;
    let (name, action, secs) = match command {
        LockCommand::Show { name } => (name, LockAction::Show, 0),
        LockCommand::Handover { name, window } => (name, LockAction::Handover, window),
        LockCommand::Break { name } => (name, LockAction::Break, 0),
    };
    let resp = target
        .call(Request::Lock {
            name: name.clone(),
            action,
            secs,
        })
        .await?;
    let report = resp.lock.unwrap_or_default();
    print_json_or(target.json, &report, |r| {
        for h in &r.broken {
            println!("broke the lock of {}, fenced off: {}", h.describe(), name);
        }
        if r.record.holders.is_empty() {
            println!("volume \"{name}\" is not locked: any client may open it for writing");
        }
        for (h, alive) in r.record.holders.iter().zip(&r.alive) {
            println!(
                "locked by {} since {} (UTC), for {}{}",
                h.describe(),
                utc_from_unix(h.since_unix),
                basalt_client::locks::held_for(h.since_unix),
                if *alive {
                    ""
                } else {
                    "; its gateway is gone: the next client takes it over"
                }
            );
        }
        if r.record.handover_until > 0 {
            println!(
                "handover open until {} (UTC): one more client may join",
                utc_from_unix(r.record.handover_until)
            );
        }
    })
}

/// `volume allow|deny`.
async fn access(
    target: &VolumeApi,
    name: String,
    allow: Vec<String>,
    deny: Vec<String>,
) -> anyhow::Result<()> {
    let resp = target
        .call(Request::Access {
            name: name.clone(),
            allow,
            deny,
        })
        .await?;
    let access = resp.access.unwrap_or_default();
    print_json_or(target.json, &access, |a| {
        if a.nvme_hosts.is_empty() {
            println!("volume \"{name}\": any NVMe/TCP host may attach it");
        } else {
            println!("volume \"{name}\": only these NVMe/TCP hosts may attach it:");
            for h in &a.nvme_hosts {
                println!("  {h}");
            }
        }
    })
}

/// Take `name`, new in the target's pool or cloned from `from_image`.
async fn create(
    target: &VolumeApi,
    name: String,
    size: Option<String>,
    from_image: Option<String>,
) -> anyhow::Result<()> {
    let json = target.json;
    let size = size.as_deref().map(parse_size).transpose()?.unwrap_or(0);
    let started = std::time::Instant::now();
    let resp = target
        .call(Request::Create {
            name,
            size,
            pool: Some(target.pool.clone()),
            from_image: from_image.clone(),
        })
        .await?;
    let v = resp.volume.expect("create returns the volume");
    if json {
        return print_volume_json(target, &v, None).await;
    }
    match from_image {
        Some(image) => println!(
            "created volume \"{}\" ({}) as a clone of image {image} in {:.1} ms",
            v.name,
            human_bytes(v.size),
            started.elapsed().as_secs_f64() * 1000.0
        ),
        None => println!("created volume \"{}\" ({})", v.name, human_bytes(v.size)),
    }
    Ok(())
}

/// List volumes, then objvols (read-only, under their export names).
async fn list(target: &VolumeApi) -> anyhow::Result<()> {
    let json = target.json;
    let resp = target.call(Request::Ls).await?;
    let volumes = resp.volumes.unwrap_or_default();
    let usages = resp.usages.unwrap_or_default();
    let pools = target.pool_names().await?;
    if json {
        let rows: Vec<serde_json::Value> = volumes
            .iter()
            .enumerate()
            .map(|(i, v)| volume_json(v, usages.get(i), &pools))
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "{:<32} {:>10} {:>10} {:<12} {:>5}  {:<20}  PARENT",
            "NAME", "SIZE", "USED", "POOL", "SNAPS", "CREATED (UTC)"
        );
        for (i, v) in volumes.iter().enumerate() {
            let used = usages
                .get(i)
                .map(|u| human_bytes(u.total_bytes))
                .unwrap_or_default();
            println!(
                "{:<32} {:>10} {:>10} {:<12} {:>5}  {:<20}  {}",
                v.name,
                human_bytes(v.size),
                used,
                pool_name(&pools, v.pool),
                v.snapshots.len(),
                utc_from_unix(v.created),
                v.parent
                    .as_ref()
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "-".into())
            );
        }
        // Object-backed volumes, read-only, under their export names.
        let objvols = target.call(Request::ObjvolLs).await?.objvols;
        for o in objvols.unwrap_or_default() {
            println!(
                "{:<32} {:>10} {:>10} {:<12} {:>5}  {:<20}  s3://{}/{} (objvol, read-only)",
                format!("objvol:{}", o.name),
                human_bytes(o.size()),
                human_bytes(o.index_bytes + o.extents_bytes),
                pool_name(&pools, o.pool),
                0,
                utc_from_unix(o.created),
                o.source.bucket,
                o.source.prefix
            );
        }
    }
    Ok(())
}

/// Show one volume.
async fn info(target: &VolumeApi, name: String) -> anyhow::Result<()> {
    let json = target.json;
    let resp = target.call(Request::Info { name }).await?;
    let v = resp.volume.expect("info returns the volume");
    let pools = target.pool_names().await?;
    if json {
        let out = volume_json(&v, resp.usage.as_ref(), &pools);
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_info(&v, resp.usage.as_ref(), &pools);
    }
    Ok(())
}

/// Resize a volume.
async fn resize(
    target: &VolumeApi,
    name: String,
    size: String,
    allow_shrink: bool,
) -> anyhow::Result<()> {
    let json = target.json;
    let size = parse_size(&size)?;
    let resp = target
        .call(Request::Resize {
            name,
            size,
            allow_shrink,
        })
        .await?;
    let v = resp.volume.expect("resize returns the volume");
    if json {
        return print_volume_json(target, &v, None).await;
    }
    println!("resized volume \"{}\" to {}", v.name, human_bytes(v.size));
    Ok(())
}

/// Where a byte of a volume lives (multi-host clusters).
async fn locate(target: &VolumeApi, name: String, offset: u64) -> anyhow::Result<()> {
    if target.meta.meta.is_none() {
        anyhow::bail!("volume locate needs --meta (the cluster's metadata)");
    }
    let cluster = crate::admin::open_cluster(&target.meta).await?;
    let location = cluster.locate(&name, offset).await?;
    // Through a JSON map: its keys sorted, as this command has always printed them.
    let out = serde_json::to_value(&location)?;
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// List a volume's snapshots.
async fn snapshot_ls(target: &VolumeApi, volume: String) -> anyhow::Result<()> {
    let json = target.json;
    let resp = target.call(Request::Info { name: volume }).await?;
    let v = resp.volume.expect("info returns the volume");
    if json {
        println!("{}", serde_json::to_string_pretty(&v.snapshots)?);
    } else if v.snapshots.is_empty() {
        println!("volume \"{}\" has no snapshots", v.name);
    } else {
        print_snapshots(&v, resp.usage.as_ref());
    }
    Ok(())
}

/// Take snapshot VOLUME@SNAPSHOT.
async fn snapshot_take(target: &VolumeApi, spec: Option<String>) -> anyhow::Result<()> {
    let json = target.json;
    let Some(spec) = spec else {
        anyhow::bail!(
            "name the snapshot to take (basalt volume snapshot VOLUME@SNAPSHOT), \
                 or list them (basalt volume snapshot ls VOLUME)"
        );
    };
    let (name, snapshot) = parse_snapshot_spec(&spec)?;
    let started = std::time::Instant::now();
    let resp = target
        .call(Request::Snapshot {
            name: name.to_string(),
            snapshot: snapshot.to_string(),
        })
        .await?;
    if json {
        let v = resp.volume.expect("snapshot returns the volume");
        let s = v
            .snapshot(snapshot)
            .expect("the new snapshot is in the volume");
        println!("{}", serde_json::to_string_pretty(s)?);
        return Ok(());
    }
    println!(
        "took snapshot {name}@{snapshot} in {:.1} ms",
        started.elapsed().as_secs_f64() * 1000.0
    );
    Ok(())
}

/// Remove a snapshot.
async fn snapshot_rm(target: &VolumeApi, snapshot: String) -> anyhow::Result<()> {
    let json = target.json;
    let (name, snap) = parse_snapshot_spec(&snapshot)?;
    let started = std::time::Instant::now();
    target
        .call_with_progress(
            Request::SnapshotRm {
                name: name.to_string(),
                snapshot: snap.to_string(),
            },
            object_progress(&format!("merging {name}@{snap}")),
        )
        .await?;
    if json {
        println!("{}", serde_json::json!({ "removed": snapshot }));
        return Ok(());
    }
    println!(
        "removed snapshot {name}@{snap} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Roll a volume back to a snapshot.
async fn rollback(target: &VolumeApi, snapshot: String) -> anyhow::Result<()> {
    let json = target.json;
    let (name, snap) = parse_snapshot_spec(&snapshot)?;
    let started = std::time::Instant::now();
    let resp = target
        .call(Request::Rollback {
            name: name.to_string(),
            snapshot: snap.to_string(),
        })
        .await?;
    let v = resp.volume.expect("rollback returns the volume");
    if json {
        return print_volume_json(target, &v, None).await;
    }
    println!(
        "rolled volume \"{name}\" back to {name}@{snap} ({}) in {:.1} ms",
        human_bytes(v.size),
        started.elapsed().as_secs_f64() * 1000.0
    );
    Ok(())
}

/// Make a clone independent of its parent.
async fn flatten(target: &VolumeApi, name: String) -> anyhow::Result<()> {
    let json = target.json;
    let started = std::time::Instant::now();
    target
        .call_with_progress(
            Request::Flatten { name: name.clone() },
            object_progress(&format!("flattening {name}")),
        )
        .await?;
    if json {
        let resp = target.call(Request::Info { name: name.clone() }).await?;
        let v = resp.volume.expect("info returns the volume");
        return print_volume_json(target, &v, resp.usage.as_ref()).await;
    }
    println!(
        "flattened volume \"{name}\" in {:.1} s: it no longer depends on a snapshot",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Make a volume from a snapshot.
async fn clone(target: &VolumeApi, snapshot: String, new: String) -> anyhow::Result<()> {
    let json = target.json;
    let (name, snap) = parse_snapshot_spec(&snapshot)?;
    let started = std::time::Instant::now();
    let resp = target
        .call(Request::Clone {
            name: name.to_string(),
            snapshot: snap.to_string(),
            new,
        })
        .await?;
    let v = resp.volume.expect("clone returns the volume");
    if json {
        return print_volume_json(target, &v, None).await;
    }
    println!(
        "created volume \"{}\" ({}) as a clone of {name}@{snap} in {:.1} ms",
        v.name,
        human_bytes(v.size),
        started.elapsed().as_secs_f64() * 1000.0
    );
    Ok(())
}

/// Remove a volume, saying what went with it.
async fn remove(target: &VolumeApi, name: String, force: bool) -> anyhow::Result<()> {
    let json = target.json;
    // Say what went: the size and the snapshots that went with it.
    let before = target.call(Request::Info { name: name.clone() }).await?;
    target
        .call(Request::Rm {
            name: name.clone(),
            force,
        })
        .await?;
    if json {
        println!("{}", serde_json::json!({ "removed": name }));
        return Ok(());
    }
    match before.volume {
        Some(v) => println!(
            "removed volume \"{name}\" ({}, {} snapshot{})",
            human_bytes(v.size),
            v.snapshots.len(),
            if v.snapshots.len() == 1 { "" } else { "s" }
        ),
        None => println!("removed volume \"{name}\""),
    }
    Ok(())
}
