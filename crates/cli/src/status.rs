//! `basalt status`: printing the cluster report gathered by `basalt_client::status`, from
//! the metadata store (`--meta`) or the control socket of `basalt up`.

use crate::daemons::MetaArgs;
use crate::global::GlobalArgs;
pub use basalt_client::status::{gather, gather_with_rates, StatusReport};
use basalt_proto::size::human_bytes;
use std::path::Path;
use std::time::Duration;

/// `basalt status`: one report with rates over `interval` seconds, or (`watch`) the
/// cluster's events, checked every `interval` seconds.
pub async fn run(
    global: &GlobalArgs,
    interval: f64,
    watch: bool,
    detail: bool,
) -> anyhow::Result<()> {
    if watch {
        let every = Duration::from_secs_f64(interval.clamp(0.1, 60.0));
        return watch_status(&global.control, &global.meta, every).await;
    }
    let interval_ms = (interval.clamp(0.0, 60.0) * 1000.0) as u64;
    let report = report(global, interval_ms).await?;
    if global.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report, detail);
    }
    Ok(())
}

/// One status report of the cluster the global flags name.
pub async fn report(global: &GlobalArgs, interval_ms: u64) -> anyhow::Result<StatusReport> {
    status_report(&global.control, &global.meta, interval_ms).await
}

/// One status report, from the metadata store (`--meta`) or the control socket.
async fn status_report(
    control: &Path,
    meta: &MetaArgs,
    interval_ms: u64,
) -> anyhow::Result<StatusReport> {
    Ok(if meta.meta.is_some() {
        let cluster = crate::admin::open_cluster(meta).await?;
        gather_with_rates(&cluster, interval_ms).await?
    } else {
        control_status(control, interval_ms).await?
    })
}

/// One status report from the control socket of `basalt up`.
async fn control_status(control: &Path, interval_ms: u64) -> anyhow::Result<StatusReport> {
    use crate::control::{call, Request};
    let resp = call(control, &Request::Status { interval_ms }).await?;
    resp.status
        .ok_or_else(|| anyhow::anyhow!("the control API sent no status"))
}

/// `basalt status --watch`: one cluster handle (`--meta`) or the control socket, polled.
async fn watch_status(control: &Path, meta: &MetaArgs, every: Duration) -> anyhow::Result<()> {
    let cluster = match meta.meta {
        Some(_) => Some(crate::admin::open_cluster(meta).await?),
        None => None,
    };
    let cluster = cluster.as_ref();
    crate::watch::run(every, move || async move {
        match cluster {
            Some(c) => Ok(basalt_client::status::gather_for_events(c).await?),
            None => control_status(control, 0).await,
        }
    })
    .await
}

/// Print the report for people; `detail` lists what each health check concerns.
pub fn print(r: &StatusReport, detail: bool) {
    print_cluster(r, detail);
    print_data(r);
    print_osds(r);
}

/// The "cluster:" section: health, map, OSDs, PGs, what is wrong, rates.
fn print_cluster(r: &StatusReport, detail: bool) {
    let up = r.osds.iter().filter(|o| o.up).count();
    let is_in = r.osds.iter().filter(|o| o.is_in).count();
    let checks = r.health_checks();
    println!("cluster:");
    println!("  health: {}", basalt_client::health::health_word(&checks));
    crate::settings_cmd::print_checks(&checks, detail);
    println!("  map:    epoch {}", r.map_epoch);
    println!("  osds:   {} total, {up} up, {is_in} in", r.osds.len());
    println!("  pools:  {}", r.pools.len());
    println!("  pgs:    {}", pg_line(r));
    for why in &r.unplaceable {
        println!("  placement: {why}");
    }
    for why in &r.below_min_size {
        println!("  blocked: {why}");
    }
    if r.degraded_objects > 0 {
        println!(
            "  recovery: {} object copies to recover",
            r.degraded_objects
        );
    }
    for why in &r.unfound {
        println!("  unfound: {why}");
    }
    print_slow_ops(r);
    if let Some(m) = &r.monitor {
        println!("  monitor: {m}");
    }
    if let Some(rt) = &r.rates {
        println!(
            "  io:      client {:.0} read IOPS ({}/s), {:.0} write IOPS ({}/s); \
             recovery {:.0} objects/s ({}/s)",
            rt.read_iops,
            human_bytes(rt.read_bytes_per_sec as u64),
            rt.write_iops,
            human_bytes(rt.write_bytes_per_sec as u64),
            rt.recovery_objects_per_sec,
            human_bytes(rt.recovery_bytes_per_sec as u64),
        );
    }
}

/// `64 total, 60 active+clean, 4 active+degraded`: the states that have PGs.
fn pg_line(r: &StatusReport) -> String {
    let mut line = format!("{} total, {} active+clean", r.pgs_total, r.pgs_active_clean);
    for (count, state) in [
        (r.pgs_recovering, "active+recovering"),
        (r.pgs_degraded, "active+degraded"),
        (r.pgs_peering, "peering"),
        (r.pgs_inactive, "inactive"),
    ] {
        if count > 0 {
            line.push_str(&format!(", {count} {state}"));
        }
    }
    line
}

/// The slow operations in flight, one line each.
fn print_slow_ops(r: &StatusReport) {
    let slow = r.slow_ops_in_flight();
    if slow.is_empty() {
        return;
    }
    println!("  slow ops: {} in flight", slow.len());
    for (osd, op) in slow {
        println!(
            "    osd.{osd}: {} obj {}{} pg {}, {:.1} s in '{}'",
            op.op,
            op.object,
            op.volume
                .as_ref()
                .map(|v| format!(" (volume {v})"))
                .unwrap_or_default(),
            op.pg,
            op.age_ms as f64 / 1000.0,
            op.stage_text()
        );
    }
}

/// The "data:" section: volumes, images, raw usage.
fn print_data(r: &StatusReport) {
    println!("data:");
    println!(
        "  volumes: {} ({} provisioned, {} stored in their layers, {} snapshots)",
        r.volumes,
        human_bytes(r.volume_bytes),
        human_bytes(r.volume_used_bytes),
        r.snapshots
    );
    if let Some(e) = &r.usage_error {
        println!("  (stored bytes unknown: an OSD gave no usage: {e})");
    }
    if r.images > 0 {
        println!(
            "  images:  {} ({} stored)",
            r.images,
            human_bytes(r.image_used_bytes)
        );
    }
    let c = r.capacity();
    let pct = if c.raw_bytes > 0 {
        c.used_bytes as f64 * 100.0 / c.raw_bytes as f64
    } else {
        0.0
    };
    println!(
        "  usage:   {} used of {} raw ({pct:.1}%), {} object copies",
        human_bytes(c.used_bytes),
        human_bytes(c.raw_bytes),
        c.object_copies
    );
    // Slots, not bytes, run out first (every object takes one): the fullest OSD says how
    // close writes are to ENOSPC.
    let fullest = r
        .osds
        .iter()
        .filter_map(|o| Some((o.id, basalt_client::health::fullness(o.stats.as_ref()?))))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((id, f)) = fullest {
        println!(
            "  fullest: osd.{id}, {:.1}% of its object slots in use (near-full at {:.0}%, \
             full at {:.0}%)",
            f * 100.0,
            r.settings.nearfull_ratio * 100.0,
            r.settings.full_ratio * 100.0
        );
    }
}

/// Print the OSD table of a report.
pub fn print_osds(r: &StatusReport) {
    println!("osds:");
    // The location column only where some OSD has one (most clusters are racks of hosts
    // in one room, or one host).
    let located = r.osds.iter().any(|o| !o.location.is_empty());
    let location_header = if located {
        format!(" {:<18}", "LOCATION")
    } else {
        String::new()
    };
    println!(
        "  {:<4} {:<12}{location_header} {:<5} {:<22} {:<10} {:>11} {:>11} {:>8} {:>6}  {:<14} \
         VERSION",
        "ID", "HOST", "CLASS", "ADDR", "STATE", "USED", "CAPACITY", "OBJECTS", "FULL", "I/O"
    );
    for o in &r.osds {
        let location = match (located, o.location.as_str()) {
            (false, _) => String::new(),
            (true, "") => format!(" {:<18}", "-"),
            (true, l) => format!(" {l:<18}"),
        };
        let class = if o.class.is_empty() { "-" } else { &o.class };
        let state = format!(
            "{},{}{}",
            if o.up { "up" } else { "down" },
            if o.is_in { "in" } else { "out" },
            // Marked down while running; FLUSHes wait until it flushed its store.
            if o.unflushed { ",unflushed" } else { "" }
        );
        let (used, cap, objs, full) = match &o.stats {
            Some(s) => (
                human_bytes(s.used_bytes),
                human_bytes(s.capacity_bytes),
                s.objects.to_string(),
                format!("{:.1}%", basalt_client::health::fullness(s) * 100.0),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let io = if o.io.is_empty() { "-" } else { &o.io };
        println!(
            "  {:<4} {:<12}{location} {class:<5} {:<22} {:<10} {:>11} {:>11} {:>8} {:>6}  {io:<14} \
             {}",
            o.id,
            o.host,
            o.addr,
            state,
            used,
            cap,
            objs,
            full,
            if o.version.is_empty() {
                "-"
            } else {
                &o.version
            }
        );
        if let Some(e) = &o.error {
            println!("       error: {e}");
        }
    }
}
