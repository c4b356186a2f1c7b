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
    /// Create a pool: replicated (--size) or erasure coded (--ec K+M).
    ///
    /// Examples:
    ///   basalt pool create rbd --size 3 --min-size 2 --pgs 64 --failure-domain host
    ///   basalt pool create cold --ec 4+2 --pgs 64     (1.5× the data, survives 2 failures)
    ///
    /// An erasure-coded pool cuts every object (a stripe) into K data chunks and M parity
    /// chunks on K+M OSDs of distinct failure domains; each chunk is one object of the OSDs'
    /// stores, so --object-size is K × the OSDs' object size (default K × 128K). Writes
    /// smaller than a stripe read the rest of it first (and every EC write is flushed on
    /// every member); S3 bucket indexes need a replicated pool (their data may be here).
    Create {
        name: String,
        /// Replicas of every object (replicated pools).
        #[arg(long, conflicts_with = "ec")]
        size: Option<u32>,
        /// Erasure code K+M, e.g. 2+1, 4+2, 8+3 (K 2..=16 data chunks, M 1..=4 parity).
        #[arg(long, value_name = "K+M")]
        ec: Option<String>,
        /// Fewest live members that still accept I/O (below it, I/O waits) [default: 2 for
        /// replicas, K+1 for --ec].
        #[arg(long)]
        min_size: Option<u32>,
        /// Placement groups (the unit of placement and recovery).
        #[arg(long, default_value_t = 64)]
        pgs: u32,
        /// Where two members of a PG must never meet: "host" or "osd".
        #[arg(long, default_value = "host")]
        failure_domain: String,
        /// Object size of volumes in this pool [default: 128K, for --ec K × 128K]; must be
        /// the OSDs' store object size (× K for --ec).
        #[arg(long)]
        object_size: Option<String>,
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
            ec,
            min_size,
            pgs,
            failure_domain,
            object_size,
        } => {
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
            let k = ec.map_or(1, |e| e.k);
            let object_size = match object_size {
                // Too large for u32: the check below rejects it by name.
                Some(text) => u32::try_from(parse_size(&text)?).unwrap_or(u32::MAX),
                None => k.saturating_mul(128 << 10),
            };
            let record = PoolRecord {
                id: 0,
                name,
                size: ec.map_or(size.unwrap_or(3), |e| e.k + e.m),
                min_size: min_size.unwrap_or(ec.map_or(2, |e| e.k + 1)),
                pg_count: pgs,
                failure_domain,
                object_size,
                ec,
            };
            let r = create_pool(meta.as_ref(), record).await?;
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
                "created pool \"{}\" (id {}): {scheme}, min_size {}, {} PGs, failure domain {}",
                r.name, r.id, r.min_size, r.pg_count, r.failure_domain
            );
        }
        PoolCommand::Ls => {
            println!(
                "{:<4} {:<20} {:<12} {:>5} {:>9} {:>6} {:<8} {:>10}",
                "ID", "NAME", "SCHEME", "SIZE", "MIN_SIZE", "PGS", "DOMAIN", "OBJECT"
            );
            for (_, v, _) in meta.list(POOLS_PREFIX).await? {
                let Ok(p) = serde_json::from_slice::<PoolRecord>(&v) else {
                    continue;
                };
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
    let credentials = meta_args.credentials()?;
    Cluster::connect_as(meta_args.connect().await?, Some(credentials))
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
