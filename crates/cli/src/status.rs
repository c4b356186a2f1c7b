//! `basalt status`: printing the cluster report gathered by `basalt_client::status`.

pub use basalt_client::status::{gather, gather_with_rates, StatusReport};
use basalt_proto::size::human_bytes;

/// Print the report for people.
pub fn print(r: &StatusReport) {
    let up = r.osds.iter().filter(|o| o.up).count();
    let is_in = r.osds.iter().filter(|o| o.is_in).count();
    let used: u64 = r
        .osds
        .iter()
        .filter_map(|o| o.stats)
        .map(|s| s.used_bytes)
        .sum();
    let raw: u64 = r
        .osds
        .iter()
        .filter_map(|o| o.stats)
        .map(|s| s.capacity_bytes)
        .sum();
    let objects: u64 = r
        .osds
        .iter()
        .filter_map(|o| o.stats)
        .map(|s| s.objects)
        .sum();
    let slow_now = r
        .osds
        .iter()
        .any(|o| o.slow_ops.iter().any(|op| op.in_flight));
    let health = if r.pgs_inactive > 0 || r.unfound_objects > 0 {
        "HEALTH_ERR"
    } else if r.pgs_active_clean == r.pgs_total
        && up == r.osds.len()
        && !slow_now
        && r.unplaceable.is_empty()
    {
        "HEALTH_OK"
    } else {
        "HEALTH_WARN"
    };
    println!("cluster:");
    println!("  health: {health}");
    println!("  map:    epoch {}", r.map_epoch);
    println!("  osds:   {} total, {up} up, {is_in} in", r.osds.len());
    println!("  pools:  {}", r.pools.len());
    let mut pg_line = format!("{} total, {} active+clean", r.pgs_total, r.pgs_active_clean);
    if r.pgs_recovering > 0 {
        pg_line.push_str(&format!(", {} active+recovering", r.pgs_recovering));
    }
    if r.pgs_degraded > 0 {
        pg_line.push_str(&format!(", {} active+degraded", r.pgs_degraded));
    }
    if r.pgs_peering > 0 {
        pg_line.push_str(&format!(", {} peering", r.pgs_peering));
    }
    if r.pgs_inactive > 0 {
        pg_line.push_str(&format!(", {} inactive", r.pgs_inactive));
    }
    println!("  pgs:    {pg_line}");
    for why in &r.unplaceable {
        println!("  placement: {why}");
    }
    if r.degraded_objects > 0 {
        println!(
            "  recovery: {} object copies to recover",
            r.degraded_objects
        );
    }
    if r.unfound_objects > 0 {
        println!(
            "  unfound: {} erasure-coded stripes lost more chunks than their code tolerates \
             (reads of them fail with EIO; bring their OSDs back)",
            r.unfound_objects
        );
    }
    let slow: Vec<_> = r
        .osds
        .iter()
        .flat_map(|o| {
            o.slow_ops
                .iter()
                .filter(|op| op.in_flight)
                .map(|op| (o.id, op))
        })
        .collect();
    if !slow.is_empty() {
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
    let pct = if raw > 0 {
        used as f64 * 100.0 / raw as f64
    } else {
        0.0
    };
    println!(
        "  usage:   {} used of {} raw ({pct:.1}%), {objects} object copies",
        human_bytes(used),
        human_bytes(raw)
    );
    print_osds(r);
}

/// Print the OSD table of a report.
pub fn print_osds(r: &StatusReport) {
    println!("osds:");
    println!(
        "  {:<4} {:<12} {:<22} {:<10} {:>11} {:>11} {:>8}",
        "ID", "HOST", "ADDR", "STATE", "USED", "CAPACITY", "OBJECTS"
    );
    for o in &r.osds {
        let state = format!(
            "{},{}",
            if o.up { "up" } else { "down" },
            if o.is_in { "in" } else { "out" }
        );
        let (used, cap, objs) = match o.stats {
            Some(s) => (
                human_bytes(s.used_bytes),
                human_bytes(s.capacity_bytes),
                s.objects.to_string(),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        println!(
            "  {:<4} {:<12} {:<22} {:<10} {:>11} {:>11} {:>8}",
            o.id, o.host, o.addr, state, used, cap, objs
        );
        if let Some(e) = &o.error {
            println!("       error: {e}");
        }
    }
}
