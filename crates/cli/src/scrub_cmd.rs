//! `basalt scrub`: compare every copy (replicated pools) or chunk (erasure-coded pools) of
//! every object and repair what disagrees.

use crate::control::Request;
use crate::volume_cmd::Target;

/// Scrub the PGs of `pool` (every pool when None) through `target`, with a progress bar
/// over PGs on a terminal; prints what was found and repaired.
pub async fn run(target: Target, pool: Option<String>, json: bool) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let bar = std::sync::OnceLock::<indicatif::ProgressBar>::new();
    let progress = move |done: u64, total: u64| {
        let bar = bar.get_or_init(|| {
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "scrubbing [{bar:40}] {pos}/{len} PGs, eta {eta}",
                )
                .expect("progress template")
                .progress_chars("=> "),
            );
            bar
        });
        bar.set_length(total);
        bar.set_position(done);
        if done == total {
            bar.finish_and_clear();
        }
    };
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
