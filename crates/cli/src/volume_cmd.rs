//! `basalt volume ...`: volume management through the control API.

use crate::control::{Request, Response};
use crate::daemons::MetaArgs;
use basalt_client::{parse_size, VolumeInfo};
use clap::Subcommand;
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
    /// Remove a volume and its data.
    Rm { name: String },
    /// Show where a byte of a volume lives: its object, PG, acting set and primary (JSON).
    ///
    /// Needs --meta (a multi-host cluster's metadata).
    Locate {
        name: String,
        /// Byte offset in the volume.
        offset: u64,
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
    println!("id:          {}", v.id);
    println!("size:        {} ({} bytes)", human(v.size), v.size);
    println!("pool:        {}", v.pool);
    println!("object size: {}", human(v.object_size as u64));
    println!("created:     {} (unix seconds)", v.created);
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
        VolumeCommand::Rm { name } => {
            target.call(Request::Rm { name: name.clone() }).await?;
            println!("removed volume \"{name}\"");
        }
    }
    Ok(())
}
