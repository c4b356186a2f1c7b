//! Cluster administration through the metadata store: pools, OSDs and PGs.

use crate::control::Request;
use crate::daemons::MetaArgs;
use crate::global::GlobalArgs;
use anyhow::Context;
use basalt_client::{create_pool_visible, Cluster, PoolRequest};
use basalt_proto::size::parse_size;
use clap::{Args, Subcommand};
use std::sync::Arc;

#[derive(Subcommand, Debug)]
pub enum PoolCommand {
    /// Create a pool: replicated (--size) or erasure coded (--ec K+M).
    ///
    /// It returns once the monitor has put the pool in the cluster map, so volumes can be
    /// made in it at once (--no-wait: once the record is written).
    ///
    /// An erasure-coded pool cuts every object (a stripe) into K data chunks and M parity
    /// chunks on K+M OSDs of distinct failure domains; each chunk is one object of the OSDs'
    /// stores, so --object-size is K × the OSDs' object size (default K × 128K). Writes
    /// smaller than a stripe read the rest of it first (and every EC write is flushed on
    /// every member); S3 bucket indexes need a replicated pool (their data may be here).
    ///
    /// Examples:
    ///   basalt pool create rbd --size 3 --min-size 2 --pgs 64 --failure-domain host
    ///   basalt pool create cold --ec 4+2 --pgs 64    # 1.5x the data, survives 2 failures
    ///   basalt pool create scratch --size 2    # on `basalt up`: failure domain osd
    ///   basalt pool create fast --size 3 --failure-domain rack --device-class nvme
    ///
    /// Racks and zones are the OSDs' --location (`basalt osd --location zone=z1,rack=r2`);
    /// device classes are detected (nvme, ssd, hdd) or given with `basalt osd
    /// --device-class`. `basalt osd ls` shows both.
    ///
    /// A pool needing more hosts (or OSDs) than the cluster has is refused, saying why:
    /// its PGs could never hold all their copies (with fewer than --min-size, never serve
    /// I/O). --allow-unplaceable creates it anyway, for a cluster still growing.
    #[command(verbatim_doc_comment)]
    Create(PoolCreateArgs),
    /// List pools: id, name, redundancy, PGs, failure domain, object size.
    ///
    /// Examples:
    ///   basalt pool ls
    ///   basalt pool ls --json --meta etcd://10.0.0.1:2379
    #[command(verbatim_doc_comment)]
    Ls,
    /// Remove an empty pool.
    ///
    /// Refused, naming them, while the pool holds volumes, snapshots, images, objvols or S3
    /// buckets (remove those first), and on `basalt up` for the pools it uses itself. It
    /// returns once the pool is out of the cluster map (--no-wait: once its record is gone);
    /// a volume made in the pool meanwhile, from an older map, keeps the pool and fails the
    /// removal.
    ///
    /// Examples:
    ///   basalt pool rm scratch
    ///   basalt pool rm cold --meta etcd://10.0.0.1:2379
    #[command(verbatim_doc_comment)]
    Rm { name: String },
    /// Show one pool's settings.
    ///
    /// Examples:
    ///   basalt pool get rbd
    #[command(verbatim_doc_comment)]
    Get { name: String },
    /// Change a pool: size (replicas), min-size, failure-domain, device-class, pgs.
    ///
    /// The monitor places the pool's PGs again and recovery moves the data while clients
    /// keep reading and writing: more replicas are copied in, fewer are dropped, a new
    /// failure domain moves copies apart or together. Returns once the cluster map shows
    /// the change (`basalt status` then shows the recovery). Refused, saying why, when the
    /// result is not a valid pool or the cluster cannot place it (--allow-unplaceable
    /// overrides the latter). An erasure-coded pool's size (K+M) is fixed.
    ///
    /// pgs splits the PGs (a multiple of the current count: each PG becomes several) or
    /// merges them (a divisor) while clients write, and returns once every PG has peered
    /// under the new count, with progress. One change at a time: the next is refused until
    /// every PG has peered under the last. At most 300 PG copies per OSD; not for
    /// erasure-coded pools (not built).
    ///
    /// Examples:
    ///   basalt pool set rbd size 3
    ///   basalt pool set rbd min-size 2
    ///   basalt pool set rbd failure-domain rack
    ///   basalt pool set rbd device-class nvme    # `any` lifts it
    ///   basalt pool set rbd pgs 128              # split 32 PGs into 128
    #[command(verbatim_doc_comment)]
    Set {
        name: String,
        /// size, min-size, failure-domain (osd, host, rack, zone), device-class (a class or
        /// any) or pgs.
        key: String,
        value: String,
        /// Change it even when the cluster has too few failure domains to place every copy.
        #[arg(long)]
        allow_unplaceable: bool,
    },
}

/// `pool create`'s flags.
#[derive(Args, Debug)]
pub struct PoolCreateArgs {
    name: String,
    /// Replicas of every object (replicated pools).
    #[arg(long, conflicts_with = "ec")]
    size: Option<u32>,
    /// Erasure code K+M, e.g. 2+1, 4+2, 8+3 (K 2..=16 data chunks, M 1..=4 parity).
    #[arg(long, value_name = "K+M")]
    ec: Option<String>,
    /// Fewest live members that still accept I/O (below it, I/O waits) [default: 2 (1 for
    /// --size 1) for replicas, K+1 for --ec].
    #[arg(long)]
    min_size: Option<u32>,
    /// Placement groups (the unit of placement and recovery) [default: 64].
    #[arg(long)]
    pgs: Option<u32>,
    /// Where two members of a PG must never meet: osd, host, rack or zone (racks and
    /// zones from the OSDs' --location) [default: osd when every OSD is on one host, as on
    /// `basalt up`; else host].
    #[arg(long, value_name = "DOMAIN")]
    failure_domain: Option<String>,
    /// Keep the pool on OSDs of this device class (nvme, ssd, hdd, or one given to `basalt
    /// osd --device-class`) [default: any].
    #[arg(long, value_name = "CLASS")]
    device_class: Option<String>,
    /// Object size of volumes in this pool [default: 128K, for --ec K × 128K]; must be
    /// the OSDs' store object size (× K for --ec).
    #[arg(long)]
    object_size: Option<String>,
    /// Create the pool even if the cluster has fewer failure domains than it needs
    /// (its PGs then stay degraded or inactive until OSDs join; `basalt status` says
    /// why). Without it such a pool is refused with the reason.
    #[arg(long)]
    allow_unplaceable: bool,
}

pub async fn run_pool(global: &GlobalArgs, command: PoolCommand) -> anyhow::Result<()> {
    match command {
        PoolCommand::Create(args) => create_pool_cmd(global, args).await,
        PoolCommand::Rm { name } => remove_pool_cmd(global, name).await,
        PoolCommand::Ls => list_pools_cmd(global).await,
        PoolCommand::Get { name } => get_pool_cmd(global, &name).await,
        PoolCommand::Set {
            name,
            key,
            value,
            allow_unplaceable,
        } => set_pool_cmd(global, name, key, value, allow_unplaceable).await,
    }
}

/// `pool create`: over the metadata (--meta) or the control API.
async fn create_pool_cmd(global: &GlobalArgs, args: PoolCreateArgs) -> anyhow::Result<()> {
    let PoolCreateArgs {
        name,
        size,
        ec,
        min_size,
        pgs,
        failure_domain,
        device_class,
        object_size,
        allow_unplaceable,
    } = args;
    let ec = ec
        .map(|text| {
            basalt_ec::Scheme::parse(&text)
                .map(|s| basalt_proto::EcProfile {
                    k: s.k() as u32,
                    m: s.m() as u32,
                })
                .map_err(|e| anyhow::anyhow!("--ec: {e}"))
        })
        .transpose()?;
    let object_size = match object_size {
        // Too large for u32: the pool check rejects it by name.
        Some(text) => Some(u32::try_from(parse_size(&text)?).unwrap_or(u32::MAX)),
        None => None,
    };
    let request = PoolRequest {
        name,
        size,
        ec,
        min_size,
        pg_count: pgs,
        failure_domain,
        device_class,
        object_size,
        allow_unplaceable,
    };
    let r = match global.meta.meta {
        Some(_) => {
            let meta = global.meta.connect().await?;
            let mut maps = basalt_client::follow_map(meta.clone())
                .await
                .context("read the cluster map")?;
            create_pool_visible(meta.as_ref(), &request, &mut maps, global.wait()).await?
        }
        None => {
            let req = Request::PoolCreate {
                pool: request,
                wait_ms: global.wait().map(|w| w.as_millis() as u64),
            };
            let resp = crate::control::call(&global.control, &req).await?;
            resp.pool.context("the control API sent no pool")?
        }
    };
    if global.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let scheme = match r.ec {
        Some(ec) => format!(
            "erasure coded {ec} ({:.2}× the data, survives {} failures), stripes of {}",
            r.size as f64 / ec.k as f64,
            ec.m,
            basalt_proto::size::human_bytes(r.object_size as u64)
        ),
        None => format!("{} replicas", r.size),
    };
    println!(
        "created pool \"{}\" (id {}): {scheme}, min_size {}, {} PGs, failure domain {}{}{}",
        r.name,
        r.id,
        r.min_size,
        r.pg_count,
        r.failure_domain,
        r.device_class
            .as_ref()
            .map_or(String::new(), |c| format!(", device class {c}")),
        if global.no_wait {
            " (--no-wait: it may not be in the cluster map yet)"
        } else {
            ""
        }
    );
    Ok(())
}

/// `pool rm`.
async fn remove_pool_cmd(global: &GlobalArgs, name: String) -> anyhow::Result<()> {
    let r = match global.meta.meta {
        Some(_) => {
            let meta = global.meta.connect().await?;
            let mut maps = basalt_client::follow_map(meta.clone())
                .await
                .context("read the cluster map")?;
            basalt_client::remove_pool(meta.as_ref(), &name, &mut maps, global.wait()).await?
        }
        None => {
            let req = Request::PoolRm {
                name: name.clone(),
                wait_ms: global.wait().map(|w| w.as_millis() as u64),
            };
            let resp = crate::control::call(&global.control, &req).await?;
            resp.pool.context("the control API sent no pool")?
        }
    };
    if global.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else if global.no_wait {
        println!(
            "removed pool \"{}\" (id {}) (--no-wait: it may still be in the cluster map)",
            r.name, r.id
        );
    } else {
        println!("removed pool \"{}\" (id {})", r.name, r.id);
    }
    Ok(())
}

/// `pool ls`.
/// `pool get NAME`: the pool's record, one setting per line.
async fn get_pool_cmd(global: &GlobalArgs, name: &str) -> anyhow::Result<()> {
    let pools = match global.meta.meta {
        Some(_) => basalt_client::pools::list_pools(global.meta.connect().await?.as_ref()).await?,
        None => {
            let resp = crate::control::call(&global.control, &Request::PoolLs).await?;
            resp.pools.unwrap_or_default()
        }
    };
    let Some(p) = pools.into_iter().find(|p| p.name == name) else {
        return Err(basalt_client::ClientError::NoSuchPool { name: name.into() }.into());
    };
    if global.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
        return Ok(());
    }
    println!("name           {}", p.name);
    println!("id             {}", p.id);
    match p.ec {
        Some(ec) => println!("scheme         erasure code {ec}"),
        None => println!("scheme         replicated"),
    }
    println!("size           {}", p.size);
    println!("min-size       {}", p.min_size);
    println!("pgs            {}", p.pg_count);
    println!("failure-domain {}", p.failure_domain);
    println!(
        "device-class   {}",
        p.device_class.as_deref().unwrap_or("any")
    );
    println!(
        "object-size    {}",
        basalt_proto::size::human_bytes(p.object_size as u64)
    );
    Ok(())
}

/// `pool set NAME KEY VALUE`: over the metadata (--meta) or the control API.
async fn set_pool_cmd(
    global: &GlobalArgs,
    name: String,
    key: String,
    value: String,
    allow_unplaceable: bool,
) -> anyhow::Result<()> {
    use basalt_client::pool_change::{set_pool, PoolSetting};
    let r = match global.meta.meta {
        Some(_) => {
            let setting = PoolSetting::parse(&key, &value)?;
            let meta = global.meta.connect().await?;
            let mut maps = basalt_client::follow_map(meta.clone())
                .await
                .context("read the cluster map")?;
            // A PG count change reports the PGs that peered under it while it waits.
            let mut progress = |peered: u32, total: u32| {
                if !global.json {
                    eprintln!(
                        "pool \"{name}\": {peered} of {total} PGs peered under the new count"
                    );
                }
            };
            set_pool(
                meta.as_ref(),
                &name,
                &setting,
                allow_unplaceable,
                &mut maps,
                global.wait(),
                &mut progress,
            )
            .await?
        }
        None => {
            let req = Request::PoolSet {
                name: name.clone(),
                key: key.clone(),
                value: value.clone(),
                allow_unplaceable,
                wait_ms: global.wait().map(|w| w.as_millis() as u64),
            };
            let resp = crate::control::call(&global.control, &req).await?;
            resp.pool.context("the control API sent no pool")?
        }
    };
    if global.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "pool \"{}\": {key} {value}; `basalt status` shows the data moving until every PG \
             is active+clean",
            r.name
        );
    }
    Ok(())
}

async fn list_pools_cmd(global: &GlobalArgs) -> anyhow::Result<()> {
    let pools = match global.meta.meta {
        Some(_) => basalt_client::pools::list_pools(global.meta.connect().await?.as_ref()).await?,
        None => {
            let resp = crate::control::call(&global.control, &Request::PoolLs).await?;
            resp.pools.unwrap_or_default()
        }
    };
    if global.json {
        println!("{}", serde_json::to_string_pretty(&pools)?);
        return Ok(());
    }
    println!(
        "{:<4} {:<20} {:<12} {:>5} {:>9} {:>6} {:<8} {:>10}",
        "ID", "NAME", "SCHEME", "SIZE", "MIN_SIZE", "PGS", "DOMAIN", "OBJECT"
    );
    for p in pools {
        let scheme = match p.ec {
            Some(ec) => format!("ec {ec}"),
            None => format!("replicas {}", p.size),
        };
        println!(
            "{:<4} {:<20} {:<12} {:>5} {:>9} {:>6} {:<8} {:>10}",
            p.id,
            p.name,
            scheme,
            p.size,
            p.min_size,
            p.pg_count,
            p.failure_domain,
            basalt_proto::size::human_bytes(p.object_size as u64)
        );
    }
    Ok(())
}

#[derive(Subcommand, Debug)]
pub enum OsdAdminCommand {
    /// List OSDs: host, address, up/down, in/out, usage.
    Ls,
    /// Mark an OSD out: its data is re-replicated elsewhere, then it holds none.
    ///
    /// Returns once the cluster map shows it out (--no-wait: once it is recorded).
    ///
    /// Example:
    ///   basalt osd out 3
    #[command(verbatim_doc_comment)]
    Out { id: u32 },
    /// Undo `out`: the OSD takes PGs again while it is up.
    ///
    /// Returns once the cluster map shows it in (--no-wait: once it is recorded).
    ///
    /// Example:
    ///   basalt osd in 3
    #[command(verbatim_doc_comment)]
    In { id: u32 },
    /// Empty an OSD before removing it: mark it out, then wait until no PG needs it.
    ///
    /// Returns once no PG lists it (acting set, complete copies, holders, EC sources) and
    /// every PG it held is active+clean elsewhere; progress on stderr once a second (PGs
    /// left, objects degraded). Past --wait-timeout it fails (exit 5) and the drain goes
    /// on: run it again to keep waiting. --no-wait: once it is marked out.
    ///
    /// Example:
    ///   basalt osd drain 3 --wait-timeout 3600
    #[command(verbatim_doc_comment)]
    Drain { id: u32 },
    /// Remove an OSD from the cluster for good: its record, liveness and failure reports.
    ///
    /// Refused while it runs (stop it first), or while a PG still needs it — its only
    /// complete copy, chunks an erasure-coded PG cannot rebuild without, unfound stripes
    /// waiting for it — naming those PGs (drain it first). --force removes it anyway and
    /// prints what is lost first. Its id is never used again: an OSD started with it (its
    /// old data directory) is refused. Returns once the cluster map no longer has it.
    ///
    /// Examples:
    ///   basalt osd rm 3
    ///   basalt osd rm 3 --force    # its disk is lost: prints the PGs lost with it
    #[command(verbatim_doc_comment)]
    Rm {
        id: u32,
        /// Remove even though PGs still need it: what only it holds is lost.
        #[arg(long)]
        force: bool,
    },
}

/// A client handle on the cluster for tools (follows the map).
pub async fn open_cluster(meta_args: &MetaArgs) -> anyhow::Result<Arc<Cluster>> {
    let credentials = meta_args.credentials()?;
    Cluster::connect_as(meta_args.connect().await?, Some(credentials))
        .await
        .context("read the cluster map")
}

pub async fn run_osd_admin(global: &GlobalArgs, command: OsdAdminCommand) -> anyhow::Result<()> {
    let meta_args = &global.meta;
    match command {
        OsdAdminCommand::Ls => {
            let cluster = open_cluster(meta_args).await?;
            let report = crate::status::gather(&cluster).await?;
            if global.json {
                println!("{}", serde_json::to_string_pretty(&report.osds)?);
            } else {
                crate::status::print_osds(&report);
            }
        }
        OsdAdminCommand::Drain { id } => {
            crate::drain_cmd::drain(global, &[id], &format!("osd.{id}")).await?
        }
        OsdAdminCommand::Rm { id, force } => {
            crate::drain_cmd::remove(global, &[id], force, &format!("osd.{id}")).await?
        }
        OsdAdminCommand::Out { id } | OsdAdminCommand::In { id } => {
            let out = matches!(command, OsdAdminCommand::Out { .. });
            let word = if out { "out" } else { "in" };
            let meta = meta_args.connect().await?;
            basalt_client::osds::set_osd_out(meta, id, out, global.wait()).await?;
            if global.json {
                println!("{}", serde_json::json!({ "osd": id, "in": !out }));
            } else {
                println!("marked osd.{id} {word}");
            }
        }
    }
    Ok(())
}

#[derive(Subcommand, Debug)]
pub enum PgCommand {
    /// List PGs: state, acting set, interval, objects left to recover, unfound stripes.
    Ls,
    /// Give up the unfound stripes of an erasure-coded PG: THEIR NEWEST WRITES ARE LOST.
    ///
    /// A stripe is unfound when its newest write is on fewer than K of the OSDs that
    /// answered (the others are down); its I/O waits for them, and `basalt status` names
    /// the OSDs. Bring those back if you can: the stripes are then found and nothing is
    /// lost. If they are gone for good, this rewrites each unfound stripe with the newest
    /// version that still decodes — or, when none does, with its parent's data (a clone)
    /// or zeros — discarding every write after it, and its I/O resumes. Chunks of the lost
    /// writes that turn up later are overwritten. Prints each stripe given up (volume and
    /// byte range, versions lost and kept). Refused when the PG has no unfound stripes.
    ///
    /// Example:
    ///   basalt pg mark-unfound-lost 1.1f
    #[command(verbatim_doc_comment)]
    MarkUnfoundLost {
        /// The PG, as `basalt status` and `basalt pg ls` show it (POOL.INDEX).
        pg: String,
    },
}

pub async fn run_pg(global: &GlobalArgs, command: PgCommand) -> anyhow::Result<()> {
    match command {
        PgCommand::Ls => list_pgs_cmd(global).await,
        PgCommand::MarkUnfoundLost { pg } => mark_unfound_lost_cmd(global, &pg).await,
    }
}

/// `pg mark-unfound-lost PG`: give up, then say per stripe what was lost.
async fn mark_unfound_lost_cmd(global: &GlobalArgs, pg: &str) -> anyhow::Result<()> {
    let pg: basalt_proto::PgId = pg
        .parse()
        .map_err(|e: String| basalt_client::ClientError::Invalid { reason: e })?;
    let cluster = open_cluster(&global.meta).await?;
    let report = cluster
        .mark_unfound_lost(pg)
        .await
        .with_context(|| format!("give up the unfound stripes of pg {pg}"))?;
    let names = cluster.layer_names().await.unwrap_or_default();
    let stripe_bytes = cluster
        .map()
        .pools
        .get(&pg.pool)
        .map_or(0, |p| p.object_size as u64);
    if global.json {
        let stripes: Vec<serde_json::Value> = report
            .stripes
            .iter()
            .map(|g| {
                serde_json::json!({
                    "inode": g.stripe.inode,
                    "index": g.stripe.index,
                    "layer": names.get(&g.stripe.inode),
                    "offset": g.stripe.index * stripe_bytes,
                    "length": stripe_bytes,
                    "lost_version": g.lost.to_string(),
                    "kept_version": g.kept.map(|v| v.to_string()),
                    "outcome": format!("{:?}", g.outcome).to_lowercase(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "pg": pg.to_string(),
                "stripes": stripes,
                "still_unfound": report.still_unfound,
            }))?
        );
    } else {
        use basalt_proto::unfound::Outcome;
        for g in &report.stripes {
            let layer = names
                .get(&g.stripe.inode)
                .cloned()
                .unwrap_or_else(|| format!("inode {:#x}", g.stripe.inode));
            let start = g.stripe.index * stripe_bytes;
            let what = format!(
                "{layer} bytes [{start}, {}) (stripe {})",
                start + stripe_bytes,
                g.stripe
            );
            let kept = g.kept.map(|v| v.to_string()).unwrap_or_default();
            match g.outcome {
                Outcome::Kept => println!(
                    "gave up {what}: lost every write after version {kept} (newest lost: {}); \
                     it now reads as at {kept}",
                    g.lost
                ),
                Outcome::Ancestor => println!(
                    "gave up {what}: lost every write to it in this layer (newest lost: {}); \
                     it now reads as its parent's data",
                    g.lost
                ),
                Outcome::Zeros => println!(
                    "gave up {what}: lost every write to it (newest lost: {}); it now reads \
                     as zeros",
                    g.lost
                ),
                Outcome::Found => {
                    println!("{what}: found again (its chunks answered): nothing lost")
                }
            }
        }
        let lost = report
            .stripes
            .iter()
            .filter(|g| g.outcome != Outcome::Found)
            .count();
        println!(
            "pg {pg}: {lost} unfound stripes given up, {} found again",
            report.stripes.len() - lost
        );
    }
    if report.still_unfound > 0 {
        anyhow::bail!(
            "pg {pg}: {} stripes are still unfound (their rewrite failed: see the primary's \
             log); run the command again",
            report.still_unfound
        );
    }
    Ok(())
}

/// `pg ls`.
async fn list_pgs_cmd(global: &GlobalArgs) -> anyhow::Result<()> {
    let cluster = open_cluster(&global.meta).await?;
    let report = crate::status::gather(&cluster).await?;
    if global.json {
        println!("{}", serde_json::to_string_pretty(&report.pgs)?);
    } else {
        println!(
            "{:<8} {:<20} {:<16} {:>9} {:>9} {:>8}",
            "PG", "STATE", "ACTING", "INTERVAL", "DEGRADED", "UNFOUND"
        );
        for p in &report.pgs {
            let acting: Vec<String> = p.acting.iter().map(|a| a.to_string()).collect();
            println!(
                "{:<8} {:<20} {:<16} {:>9} {:>9} {:>8}",
                p.pg,
                p.state,
                format!("[{}]", acting.join(",")),
                p.interval,
                p.degraded_objects,
                p.unfound_objects
            );
        }
    }
    Ok(())
}
