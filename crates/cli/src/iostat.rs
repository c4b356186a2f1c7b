//! `basalt volume iostat`: per-volume IOPS, MiB/s and latency, every `--interval` seconds,
//! from the `/metrics` of the gateways serving the volumes (basalt_metrics::iostat computes,
//! this prints).

use anyhow::Context;
use basalt_metrics::iostat::{parse, rates, scrape, table, volume_totals, VolumeTotals};
use clap::Args;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// `basalt volume iostat`.
#[derive(Args, Debug)]
pub struct IostatArgs {
    /// `/metrics` address (IP:PORT) of a gateway (`basalt up`'s banner, `basalt nbd`,
    /// `basalt nvmf`), started with --metrics-per-volume N; repeat to sum several.
    #[arg(long = "endpoint", value_name = "IP:PORT", required = true)]
    pub endpoints: Vec<String>,
    /// Seconds between reports.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Reports to print, then exit [default: until interrupted].
    #[arg(long)]
    pub count: Option<u64>,
}

/// Per-volume totals summed over every endpoint.
fn totals(endpoints: &[String]) -> anyhow::Result<BTreeMap<String, VolumeTotals>> {
    let mut samples = Vec::new();
    for e in endpoints {
        samples.extend(parse(&scrape(e).context("read a gateway's metrics")?));
    }
    Ok(volume_totals(&samples))
}

pub fn run(args: IostatArgs) -> anyhow::Result<()> {
    if !(args.interval.is_finite() && args.interval >= 0.1) {
        anyhow::bail!("--interval {}: give at least 0.1 seconds", args.interval);
    }
    let mut before = totals(&args.endpoints)?;
    let mut at = Instant::now();
    let mut printed = 0;
    // Loop bound: --count reports, or until interrupted.
    while args.count.is_none_or(|n| printed < n) {
        std::thread::sleep(Duration::from_secs_f64(args.interval));
        let after = totals(&args.endpoints)?;
        let now = Instant::now();
        let rows = rates(&before, &after, (now - at).as_secs_f64());
        print!("{}", table(&rows));
        if rows.is_empty() {
            println!("(no per-volume series: start the gateway with --metrics-per-volume N)");
        }
        println!();
        crate::daemons::flush_stdout();
        (before, at) = (after, now);
        printed += 1;
    }
    Ok(())
}
