//! `basalt scrub`: compare every copy (replicated pools) or chunk (erasure-coded pools) of
//! every object and repair what disagrees.

use crate::control::Request;
use crate::volume_cmd::VolumeApi;

/// Scrub the PGs of `pool` (every pool when None) through `target`, with progress over
/// PGs on stderr; prints what was found and repaired.
pub async fn run(target: VolumeApi, pool: Option<String>, json: bool) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let progress =
        crate::progress::Meter::new("scrubbing", crate::progress::Unit::Count("PGs")).reporter();
    let resp = target
        .call_with_progress(Request::Scrub { pool: pool.clone() }, progress)
        .await?;
    let report = resp
        .scrub
        .ok_or_else(|| anyhow::anyhow!("the cluster sent no scrub report"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "scrubbed {} PGs{} in {:.1} s: {} objects checked, {} inconsistent, {} repaired",
        report.pgs,
        pool.map(|p| format!(" of pool {p}")).unwrap_or_default(),
        started.elapsed().as_secs_f64(),
        report.objects,
        report.inconsistent,
        report.repaired
    );
    if report.repaired < report.inconsistent {
        anyhow::bail!(
            "{} objects could not be repaired (see the OSD logs: \"scrub:\" lines)",
            report.inconsistent - report.repaired
        );
    }
    Ok(())
}
