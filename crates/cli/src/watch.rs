//! `basalt status --watch`: cluster events as they happen (like `ceph -w`), from status
//! reports taken every interval and compared by basalt_client::events.

use basalt_client::events::events;
use basalt_client::status::StatusReport;
use std::time::Duration;

/// Print a summary, then every event between consecutive reports, each line stamped with
/// the UTC time it was seen; runs until interrupted. `report` gathers one status report.
pub async fn run<F, Fut>(interval: Duration, mut report: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<StatusReport>>,
{
    let mut prev = report().await?;
    let up = prev.osds.iter().filter(|o| o.up).count();
    println!(
        "{} map epoch {}: {} OSDs ({up} up), {} PGs ({} active+clean)",
        stamp(),
        prev.map_epoch,
        prev.osds.len(),
        prev.pgs_total,
        prev.pgs_active_clean
    );
    crate::daemons::flush_stdout();
    // Loop bound: until interrupted (Ctrl-C ends the process).
    loop {
        tokio::time::sleep(interval).await;
        let next = match report().await {
            Ok(r) => r,
            Err(e) => {
                // The cluster may be restarting: say so and keep watching.
                println!("{} status unavailable: {e:#}", stamp());
                crate::daemons::flush_stdout();
                continue;
            }
        };
        for e in events(&prev, &next) {
            println!("{} {e}", stamp());
        }
        crate::daemons::flush_stdout();
        prev = next;
    }
}

/// The time now, `HH:MM:SS` UTC.
fn stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60
    )
}
