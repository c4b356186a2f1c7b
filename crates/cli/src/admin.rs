//! Cluster administration through the metadata store: pools, OSDs and PGs.

use crate::daemons::MetaArgs;
use anyhow::{bail, Context};
use basalt_client::{create_pool, Cluster};
use basalt_meta::schema::{osd_key, OsdRecord, PoolRecord, POOLS_PREFIX};
use basalt_proto::size::parse_size;
use clap::Subcommand;
use std::sync::Arc;

#[derive(Subcommand, Debug)]
pub enum PoolCommand {
    /// Create a replicated pool.
    ///
    /// Example: basalt pool create rbd --size 3 --min-size 2 --pgs 64 --failure-domain host
    Create {
        name: String,
        /// Replicas of every object.
        #[arg(long, default_value_t = 3)]
        size: u32,
        /// Fewest live replicas that still accept I/O (below it, I/O waits).
        #[arg(long, default_value_t = 2)]
        min_size: u32,
        /// Placement groups (the unit of placement and recovery).
        #[arg(long, default_value_t = 64)]
        pgs: u32,
        /// Where two replicas must never meet: "host" or "osd".
        #[arg(long, default_value = "host")]
        failure_domain: String,
        /// Object size of volumes in this pool (must equal the OSDs' store object size).
        #[arg(long, default_value = "128K")]
        object_size: String,
    },
    /// List pools.
    Ls,
}

pub async fn run_pool(meta_args: &MetaArgs, command: PoolCommand) -> anyhow::Result<()> {
    let meta = meta_args.connect().await?;
    match command {
        PoolCommand::Create {
            name,
            size,
            min_size,
            pgs,
            failure_domain,
            object_size,
        } => {
            let record = PoolRecord {
                id: 0,
                name,
                size,
                min_size,
                pg_count: pgs,
                failure_domain,
                // Too large for u32: the check below rejects it by name.
                object_size: u32::try_from(parse_size(&object_size)?).unwrap_or(u32::MAX),
                ec: None,
            };
            let r = create_pool(meta.as_ref(), record).await?;
            println!(
                "created pool \"{}\" (id {}): {} replicas, min_size {}, {} PGs, failure domain {}",
                r.name, r.id, r.size, r.min_size, r.pg_count, r.failure_domain
            );
        }
        PoolCommand::Ls => {
            println!(
                "{:<4} {:<20} {:>5} {:>9} {:>6} {:<8} {:>8}",
                "ID", "NAME", "SIZE", "MIN_SIZE", "PGS", "DOMAIN", "OBJECT"
            );
            for (_, v, _) in meta.list(POOLS_PREFIX).await? {
                let Ok(p) = serde_json::from_slice::<PoolRecord>(&v) else {
                    continue;
                };
                println!(
                    "{:<4} {:<20} {:>5} {:>9} {:>6} {:<8} {:>8}",
                    p.id, p.name, p.size, p.min_size, p.pg_count, p.failure_domain, p.object_size
                );
            }
        }
    }
    Ok(())
}

#[derive(Subcommand, Debug)]
pub enum OsdAdminCommand {
    /// List OSDs: host, address, up/down, in/out, usage.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Mark an OSD out: its data is re-replicated elsewhere, then it holds none.
    Out { id: u32 },
    /// Undo `out`: the OSD takes PGs again while it is up.
    In { id: u32 },
}

/// A client handle on the cluster for tools (follows the map).
pub async fn open_cluster(meta_args: &MetaArgs) -> anyhow::Result<Arc<Cluster>> {
    Cluster::connect(meta_args.connect().await?)
        .await
        .context("read the cluster map")
}

pub async fn run_osd_admin(meta_args: &MetaArgs, command: OsdAdminCommand) -> anyhow::Result<()> {
    match command {
        OsdAdminCommand::Ls { json } => {
            let cluster = open_cluster(meta_args).await?;
            let report = crate::status::gather(&cluster).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report.osds)?);
            } else {
                crate::status::print_osds(&report);
            }
        }
        OsdAdminCommand::Out { id } | OsdAdminCommand::In { id } => {
            let out = matches!(command, OsdAdminCommand::Out { .. });
            let meta = meta_args.connect().await?;
            let key = osd_key(id);
            let Some((v, rev)) = meta.get(&key).await? else {
                bail!("osd.{id} does not exist");
            };
            let mut rec: OsdRecord = serde_json::from_slice(&v)?;
            rec.admin_out = out;
            if meta
                .compare_and_swap(&key, rev, serde_json::to_vec(&rec)?)
                .await?
                .is_none()
            {
                bail!("osd.{id} changed concurrently; try again");
            }
            println!("marked osd.{id} {}", if out { "out" } else { "in" });
        }
    }
    Ok(())
}

#[derive(Subcommand, Debug)]
pub enum PgCommand {
    /// List PGs: state, acting set, interval, objects left to recover.
    Ls {
        #[arg(long)]
        json: bool,
    },
}

pub async fn run_pg(meta_args: &MetaArgs, command: PgCommand) -> anyhow::Result<()> {
    let PgCommand::Ls { json } = command;
    let cluster = open_cluster(meta_args).await?;
    let report = crate::status::gather(&cluster).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report.pgs)?);
    } else {
        println!(
            "{:<8} {:<20} {:<16} {:>9} {:>9}",
            "PG", "STATE", "ACTING", "INTERVAL", "DEGRADED"
        );
        for p in &report.pgs {
            let acting: Vec<String> = p.acting.iter().map(|a| a.to_string()).collect();
            println!(
                "{:<8} {:<20} {:<16} {:>9} {:>9}",
                p.pg,
                p.state,
                format!("[{}]", acting.join(",")),
                p.interval,
                p.degraded_objects
            );
        }
    }
    Ok(())
}
