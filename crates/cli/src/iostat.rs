//! `basalt volume iostat`: per-volume IOPS, MiB/s and latency, every `--interval` seconds,
//! from the control API of `basalt up` (as `rbd perf image iostat` asks the cluster), or
//! from the `/metrics` of the gateways serving the volumes (basalt_metrics::iostat
//! computes, this prints).

use crate::volume_cmd::VolumeApi;
use anyhow::Context;
use basalt_metrics::iostat::{parse, rates, scrape, table, volume_totals, VolumeTotals};
use clap::Args;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// `basalt volume iostat`.
#[derive(Args, Debug)]
pub struct IostatArgs {
    /// `/metrics` address (IP:PORT) of a gateway (`basalt nbd`, `basalt nvmf`, or `basalt
    /// up`'s banner), started with --metrics-per-volume N; repeat to sum several. Without
    /// it, `basalt up` is asked through its control API.
    #[arg(long = "endpoint", value_name = "IP:PORT")]
    pub endpoints: Vec<String>,
    /// Seconds between reports.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Reports to print, then exit [default: until interrupted].
    #[arg(long)]
    pub count: Option<u64>,
}

/// Per-volume totals summed over every endpoint, or from the control API without one.
async fn totals(
    target: &VolumeApi,
    endpoints: &[String],
) -> anyhow::Result<BTreeMap<String, VolumeTotals>> {
    if endpoints.is_empty() {
        return control_totals(target).await;
    }
    let endpoints = endpoints.to_vec();
    let samples = tokio::task::spawn_blocking(move || {
        let mut samples = Vec::new();
        for e in &endpoints {
            samples.extend(parse(&scrape(e).context("read a gateway's metrics")?));
        }
        anyhow::Ok(samples)
    })
    .await??;
    Ok(volume_totals(&samples))
}

/// Per-volume totals of the volumes `basalt up` serves.
async fn control_totals(target: &VolumeApi) -> anyhow::Result<BTreeMap<String, VolumeTotals>> {
    if target.meta.meta.is_some() {
        anyhow::bail!(
            "on a multi-host cluster, give the gateways' /metrics with --endpoint IP:PORT \
             (each started with --metrics-per-volume N)"
        );
    }
    let resp = target.call(basalt_control::Request::Iostat).await?;
    Ok(resp
        .iostat
        .unwrap_or_default()
        .into_iter()
        .map(|v| {
            let totals = VolumeTotals {
                reads: v.reads as f64,
                writes: v.writes as f64,
                read_bytes: v.read_bytes as f64,
                write_bytes: v.write_bytes as f64,
                read_seconds: v.read_seconds,
                write_seconds: v.write_seconds,
            };
            (v.volume, totals)
        })
        .collect())
}

pub async fn run(target: &VolumeApi, args: IostatArgs) -> anyhow::Result<()> {
    if !(args.interval.is_finite() && args.interval >= 0.1) {
        anyhow::bail!("--interval {}: give at least 0.1 seconds", args.interval);
    }
    let mut before = totals(target, &args.endpoints).await?;
    let mut at = Instant::now();
    let mut printed = 0;
    // Loop bound: --count reports, or until interrupted.
    while args.count.is_none_or(|n| printed < n) {
        tokio::time::sleep(Duration::from_secs_f64(args.interval)).await;
        let after = totals(target, &args.endpoints).await?;
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
