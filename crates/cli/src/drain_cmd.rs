//! `basalt osd drain/rm` and `basalt host drain/rm`: argument parsing and printing; the
//! work is `basalt_client::osd_admin`'s.

use crate::global::GlobalArgs;
use basalt_client::osd_admin::{self, DrainProgress, PgNeed};
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum HostCommand {
    /// Drain every OSD of a host: `basalt osd drain` for each of them at once.
    ///
    /// Marks them out, then waits (up to --wait-timeout) until no PG needs any of them
    /// and every PG they held is active+clean on other hosts; progress on stderr once a
    /// second. The cluster needs enough other hosts for the pools' failure domains.
    ///
    /// Example:
    ///   basalt host drain node3 --wait-timeout 3600
    #[command(verbatim_doc_comment)]
    Drain { name: String },
    /// Remove every OSD of a host from the cluster for good (`basalt osd rm` for each).
    ///
    /// Refused while any of them runs, or while a PG still needs one of them (drain the
    /// host first), unless --force.
    ///
    /// Examples:
    ///   basalt host rm node3
    ///   basalt host rm node3 --force    # its disks are lost: prints what goes with them
    #[command(verbatim_doc_comment)]
    Rm {
        name: String,
        /// Remove even though PGs still need these OSDs: what only they hold is lost.
        #[arg(long)]
        force: bool,
    },
}

/// `host drain|rm`.
pub async fn run_host(global: &GlobalArgs, command: HostCommand) -> anyhow::Result<()> {
    let meta = global.meta.connect().await?;
    match command {
        HostCommand::Drain { name } => {
            let ids = osd_admin::host_osds(meta.as_ref(), &name).await?;
            drain(global, &ids, &format!("host {name}")).await
        }
        HostCommand::Rm { name, force } => {
            let ids = osd_admin::host_osds(meta.as_ref(), &name).await?;
            remove(global, &ids, force, &format!("host {name}")).await
        }
    }
}

/// `osd.1, osd.2`.
fn names(ids: &[u32]) -> String {
    ids.iter()
        .map(|i| format!("osd.{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One progress line on stderr.
fn print_progress(p: &DrainProgress) {
    let first: Vec<&str> = p.pgs_left.iter().take(8).map(String::as_str).collect();
    let more = match p.pgs_left.len().saturating_sub(first.len()) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    if p.pgs_left.is_empty() {
        eprintln!("drain: no PG needs them any more");
    } else {
        eprintln!(
            "drain: {} PGs left ({}{more}), {} objects degraded",
            p.pgs_left.len(),
            first.join(", "),
            p.degraded_objects
        );
    }
}

/// Drain `ids` (`what` names them in messages).
pub async fn drain(global: &GlobalArgs, ids: &[u32], what: &str) -> anyhow::Result<()> {
    let meta = global.meta.connect().await?;
    osd_admin::drain_osds(meta, ids, global.wait(), print_progress).await?;
    if global.json {
        println!(
            "{}",
            serde_json::json!({ "drained": ids, "complete": !global.no_wait })
        );
    } else if global.no_wait {
        println!(
            "marked {} out (--no-wait: not waiting for the drain; `basalt osd drain` again \
             waits for it)",
            names(ids)
        );
    } else {
        println!(
            "drained {what} ({}): no PG needs it, `basalt {} rm` can remove it",
            names(ids),
            if what.starts_with("host") {
                "host"
            } else {
                "osd"
            }
        );
    }
    Ok(())
}

/// What `--force` loses, on stderr before it proceeds.
fn print_loss(ids: &[u32], needed: &[PgNeed]) {
    eprintln!(
        "--force: removing {} although {} PGs still need them; lost with them:",
        names(ids),
        needed.len()
    );
    for n in needed {
        eprintln!(
            "  pg {} (pool {}): {}; objects: count not recorded ({} degraded, {} unfound)",
            n.pg, n.pool, n.reason, n.degraded_objects, n.unfound_objects
        );
    }
}

/// Remove `ids` (`what` names them in messages).
pub async fn remove(
    global: &GlobalArgs,
    ids: &[u32],
    force: bool,
    what: &str,
) -> anyhow::Result<()> {
    let meta = global.meta.connect().await?;
    let plan = osd_admin::plan_removal(meta.clone(), ids).await?;
    if force && !plan.needed.is_empty() {
        print_loss(ids, &plan.needed);
    }
    osd_admin::remove_osds(meta, &plan, force, global.wait()).await?;
    if global.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "removed": ids,
                "forced": force && !plan.needed.is_empty(),
                "lost": plan.needed,
            }))?
        );
    } else {
        println!(
            "removed {what} ({}){}",
            names(ids),
            if global.no_wait {
                " (--no-wait: it may still be in the cluster map)"
            } else {
                ""
            }
        );
    }
    Ok(())
}
