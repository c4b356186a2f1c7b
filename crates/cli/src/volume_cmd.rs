//! `basalt volume ...`: volume management through the control API.

use crate::control::{Request, Response};
use crate::daemons::MetaArgs;
use basalt_bench::environment::utc_from_unix;
use basalt_client::{parse_size, parse_snapshot_spec, VolumeInfo};
use clap::{Args, Subcommand};
use std::net::SocketAddr;

/// Where volume requests go: the control API of `basalt up`, or a cluster's metadata.
pub struct Target {
    control: SocketAddr,
    meta: MetaArgs,
    pool: String,
}

impl Target {
    pub fn new(control: SocketAddr, meta: MetaArgs, pool: String) -> Self {
        Self {
            control,
            meta,
            pool,
        }
    }

    async fn call(&self, req: Request) -> anyhow::Result<Response> {
        if self.meta.meta.is_none() {
            return crate::control::call(self.control, &req).await;
        }
        let cluster = crate::admin::open_cluster(&self.meta).await?;
        let map = cluster.map();
        let pool = map
            .pools
            .values()
            .find(|p| p.name == self.pool)
            .map(|p| p.id);
        let pool = match (pool, &req) {
            (Some(id), _) => id,
            (None, Request::Create { .. }) => {
                anyhow::bail!(
                    "pool \"{}\" is not in the cluster map (create it with `basalt pool create`, \
                     or choose one with --pool)",
                    self.pool
                )
            }
            (None, _) => 0,
        };
        let resp = crate::control::handle(&cluster, pool, req).await;
        if !resp.ok {
            anyhow::bail!("{}", resp.error.unwrap_or_else(|| "unknown error".into()));
        }
        Ok(resp)
    }
}

#[derive(Subcommand)]
pub enum VolumeCommand {
    /// Create a volume; it is exported over NBD under its name at once.
    ///
    /// Example: basalt volume create db1 --size 10G
    Create {
        name: String,
        /// Size with an optional K, M, G or T suffix (binary units); a multiple of 4096.
        #[arg(long, short)]
        size: String,
    },
    /// List volumes.
    Ls {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one volume.
    Info {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Change a volume's size. Shrinking discards the data past the new end.
    ///
    /// Connected NBD clients keep the size they negotiated; reconnect to see the new one.
    Resize {
        name: String,
        /// New size, e.g. 20G.
        size: String,
    },
    /// Remove a volume and its data, snapshots included.
    ///
    /// Refused while another volume is a clone of one of its snapshots.
    Rm { name: String },
    /// Take a snapshot (`snapshot VOL@SNAP`), or list (`snapshot ls VOL`) a volume's snapshots.
    ///
    /// A snapshot is crash-consistent: it holds every write acknowledged before the command
    /// returns and none that starts after. It takes the same time at any volume size
    /// (metadata only). A snapshot is exported read-only over NBD as `VOL@SNAP`.
    ///
    /// Examples: basalt volume snapshot db1@before-upgrade
    ///           basalt volume snapshot ls db1
    Snapshot(SnapshotArgs),
    /// Make a new volume from a snapshot, in O(1): it reads the snapshot's data until it
    /// writes its own (copy-on-write, per object).
    ///
    /// Example: basalt volume clone golden@v1 vm1-disk
    Clone {
        /// The snapshot to clone, VOLUME@SNAPSHOT.
        snapshot: String,
        /// Name of the new volume.
        new: String,
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

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    command: Option<SnapshotCommand>,
    /// The snapshot to take, VOLUME@SNAPSHOT.
    spec: Option<String>,
}

#[derive(Subcommand)]
pub enum SnapshotCommand {
    /// List a volume's snapshots, oldest first.
    Ls {
        volume: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn human(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    for (unit, size) in UNITS {
        if bytes >= size {
            return format!("{:.1}{unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes}")
}

fn print_info(v: &VolumeInfo) {
    println!("name:        {}", v.name);
    println!("id:          {:#x} (head layer {})", v.id, v.id as u16);
    println!("size:        {} ({} bytes)", human(v.size), v.size);
    println!("pool:        {}", v.pool);
    println!("object size: {}", human(v.object_size as u64));
    println!("created:     {}", utc_from_unix(v.created));
    match &v.parent {
        Some(p) => println!(
            "parent:      {}@{} (layer {})",
            p.volume, p.snapshot, p.inode as u16
        ),
        None => println!("parent:      none"),
    }
    if !v.snapshots.is_empty() {
        println!("snapshots:   {}", v.snapshots.len());
        print_snapshots(v);
    }
}

fn print_snapshots(v: &VolumeInfo) {
    println!(
        "  {:<24} {:>10} {:>6}  CREATED",
        "SNAPSHOT", "SIZE", "LAYER"
    );
    for s in &v.snapshots {
        println!(
            "  {:<24} {:>10} {:>6}  {}{}",
            s.name,
            human(s.size),
            s.inode as u16,
            utc_from_unix(s.created),
            if s.removing { "  (being removed)" } else { "" }
        );
    }
}

pub async fn run(target: Target, command: VolumeCommand) -> anyhow::Result<()> {
    match command {
        VolumeCommand::Create { name, size } => {
            let size = parse_size(&size)?;
            let resp = target.call(Request::Create { name, size }).await?;
            let v = resp.volume.expect("create returns the volume");
            println!("created volume \"{}\" ({})", v.name, human(v.size));
        }
        VolumeCommand::Ls { json } => {
            let resp = target.call(Request::Ls).await?;
            let volumes = resp.volumes.unwrap_or_default();
            if json {
                println!("{}", serde_json::to_string_pretty(&volumes)?);
            } else {
                println!("{:<32} {:>10} {:>6} {:>8}", "NAME", "SIZE", "POOL", "ID");
                for v in volumes {
                    println!(
                        "{:<32} {:>10} {:>6} {:>8}",
                        v.name,
                        human(v.size),
                        v.pool,
                        v.id
                    );
                }
            }
        }
        VolumeCommand::Info { name, json } => {
            let resp = target.call(Request::Info { name }).await?;
            let v = resp.volume.expect("info returns the volume");
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print_info(&v);
            }
        }
        VolumeCommand::Resize { name, size } => {
            let size = parse_size(&size)?;
            let resp = target.call(Request::Resize { name, size }).await?;
            let v = resp.volume.expect("resize returns the volume");
            println!("resized volume \"{}\" to {}", v.name, human(v.size));
        }
        VolumeCommand::Locate { name, offset } => {
            if target.meta.meta.is_none() {
                anyhow::bail!("volume locate needs --meta (the cluster's metadata)");
            }
            let cluster = crate::admin::open_cluster(&target.meta).await?;
            let info = cluster.volume_info(&name).await?;
            let map = cluster.map();
            let pool = map
                .pools
                .get(&info.pool)
                .ok_or_else(|| anyhow::anyhow!("pool {} is not in the map", info.pool))?;
            let obj = basalt_proto::ObjectId::new(info.id, offset / info.object_size as u64);
            let pg = basalt_placement::ClusterMap::pg_of(pool, obj);
            let acting = map.acting(pg)?.to_vec();
            let placement = map.placement(pg)?.to_vec();
            let out = serde_json::json!({
                "volume": name,
                "offset": offset,
                "object": obj.to_string(),
                "object_index": obj.index,
                "pg": pg.to_string(),
                "epoch": map.epoch,
                "placement": placement,
                "acting": acting,
                "primary": acting.first(),
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        VolumeCommand::Snapshot(SnapshotArgs {
            command: Some(SnapshotCommand::Ls { volume, json }),
            ..
        }) => {
            let resp = target.call(Request::Info { name: volume }).await?;
            let v = resp.volume.expect("info returns the volume");
            if json {
                println!("{}", serde_json::to_string_pretty(&v.snapshots)?);
            } else if v.snapshots.is_empty() {
                println!("volume \"{}\" has no snapshots", v.name);
            } else {
                print_snapshots(&v);
            }
        }
        VolumeCommand::Snapshot(SnapshotArgs {
            command: None,
            spec,
        }) => {
            let Some(spec) = spec else {
                anyhow::bail!(
                    "name the snapshot to take (basalt volume snapshot VOLUME@SNAPSHOT), \
                     or list them (basalt volume snapshot ls VOLUME)"
                );
            };
            let (name, snapshot) = parse_snapshot_spec(&spec)?;
            let started = std::time::Instant::now();
            target
                .call(Request::Snapshot {
                    name: name.to_string(),
                    snapshot: snapshot.to_string(),
                })
                .await?;
            println!(
                "took snapshot {name}@{snapshot} in {:.1} ms",
                started.elapsed().as_secs_f64() * 1000.0
            );
        }
        VolumeCommand::Clone { snapshot, new } => {
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
            println!(
                "created volume \"{}\" ({}) as a clone of {name}@{snap} in {:.1} ms",
                v.name,
                human(v.size),
                started.elapsed().as_secs_f64() * 1000.0
            );
        }
        VolumeCommand::Rm { name } => {
            target.call(Request::Rm { name: name.clone() }).await?;
            println!("removed volume \"{name}\"");
        }
    }
    Ok(())
}
