//! What metrics cost (issue 16): 4k random read and write IOPS at QD32 through NBD with
//! metrics on (as by default: `/metrics` served, latency histograms and frontend counters
//! kept) and off (`--metrics-listen off`), and the CPU per IO of each. Two `basalt up` run
//! side by side with `--no-local-path`, so every request crosses the TCP paths where the
//! OSDs time it (queue wait, store, replication), in interleaved rounds.

use super::side_by_side::{self, Rounds, Variant, Workload};
use super::{Ctx, Section};
use crate::cluster::{ClusterConfig, UpProcess};
use crate::results::{Figure, Row, SectionLayout, SectionReport, SectionStatus};
use basalt_proto::size::format_size;

/// Section id.
pub const ID: &str = "metrics";
const TITLE: &str = "Metrics: on vs off";

const WORKLOADS: [Workload; 2] = [
    side_by_side::RANDREAD_4K_QD32,
    side_by_side::RANDWRITE_4K_QD32,
];

/// The variants, in the order of the clusters: the baseline first.
const VARIANTS: [&str; 2] = ["off", "on"];

/// The section: `quick` and `smoke` shorten the runs.
pub struct MetricsSection {
    pub quick: bool,
    pub smoke: bool,
}

impl MetricsSection {
    /// At least 5 rounds outside the smoke test: a 2 % difference is below the noise of a
    /// single run on a shared machine.
    fn rounds(&self) -> Rounds {
        let (rounds, runtime_s, ramp_s, size_bytes) = if self.smoke {
            (1, 1, 0, 64 << 20)
        } else if self.quick {
            (5, 5, 1, 512 << 20)
        } else {
            (7, 15, 2, 512 << 20)
        };
        Rounds {
            rounds,
            runtime_s,
            ramp_s,
            size_bytes,
        }
    }

    /// The two clusters: metrics off, then on.
    fn start(&self, ctx: &mut Ctx) -> anyhow::Result<Vec<UpProcess>> {
        let size_bytes = self.rounds().size_bytes;
        let config = ClusterConfig {
            osds: 3,
            replicas: 3,
            ec: None,
            pgs: 32,
            object_size: "128K".into(),
            osd_size: "4G".into(),
            volume_size: format_size(size_bytes),
            s3: false,
            nvmf: false,
            up_args: Vec::new(),
        };
        let clusters = [
            (
                VARIANTS[0],
                vec!["--no-local-path", "--metrics-listen", "off"],
            ),
            (
                VARIANTS[1],
                vec!["--no-local-path", "--metrics-listen", "127.0.0.1:0"],
            ),
        ];
        side_by_side::start_clusters(ctx, ID, &config, &clusters, size_bytes)
    }
}

impl Section for MetricsSection {
    fn id(&self) -> &'static str {
        ID
    }

    fn plan(&self, _ctx: &Ctx) -> Vec<f64> {
        let rounds = self.rounds();
        let start = 2.0 * (5.0 + rounds.size_bytes as f64 / (100u64 << 20) as f64);
        std::iter::once(start)
            .chain(side_by_side::plan(&rounds, WORKLOADS.len(), VARIANTS.len()))
            .collect()
    }

    fn run(&self, ctx: &mut Ctx) -> SectionReport {
        let mut notes = Vec::new();
        let rounds = self.rounds();
        ctx.progress
            .step("metrics: start two clusters and write their volumes", 0.0);
        let figures = match self.start(ctx) {
            Ok(clusters) => {
                let variants: Vec<Variant> = clusters
                    .iter()
                    .zip(VARIANTS)
                    .map(|(c, name)| Variant {
                        name,
                        cluster: c,
                        uri: c.uri.clone(),
                    })
                    .collect();
                let figures =
                    side_by_side::measure(ctx, ID, &rounds, &WORKLOADS, &variants, &mut notes);
                notes.push(check_switch(&clusters));
                figures
            }
            Err(e) => side_by_side::failed(
                ctx,
                ID,
                format!("{e:#}"),
                &rounds,
                WORKLOADS.len(),
                VARIANTS.len(),
            ),
        };
        let _ = std::fs::remove_dir_all(ctx.work_dir.join(ID));
        notes.push(
            "No Prometheus scraped the \"on\" cluster: a scrape costs per scrape, not per \
             I/O; what is measured is the recording on the I/O path."
                .into(),
        );
        SectionReport {
            id: ID.into(),
            title: TITLE.into(),
            intro: format!(
                "fio's nbd engine, 4k random read and write at QD32, {} s per run ({} s \
                 ramp), {} interleaved rounds, the median round shown. Two `basalt up` (3 \
                 OSDs, 3 replicas, `--no-local-path`: gateway to OSD and OSD to OSD over \
                 loopback TCP) run side by side: metrics off (`--metrics-listen off`: no \
                 endpoint, no latency histograms, no frontend counters) and on (the \
                 default). The ratio is the share of the IOPS kept with metrics on; CPU per \
                 IO is the `basalt up` process's user + system time over the run's IOs. \
                 Goal: on and off differ by ≤ 2 %.",
                rounds.runtime_s, rounds.ramp_s, rounds.rounds
            ),
            baseline_name: "Metrics off".into(),
            status: SectionStatus::Measured,
            layout: SectionLayout::Comparison,
            notes,
            rows: rows(figures),
        }
    }
}

/// What shows the switch worked: the "off" cluster served no `/metrics`, the "on" one
/// recorded the latency of the writes measured (a switch that did nothing would make the
/// comparison meaningless).
fn check_switch(clusters: &[UpProcess]) -> String {
    let [off, on] = clusters else {
        return "Not checked: two clusters expected.".into();
    };
    let off = match &off.metrics {
        None => "the \"off\" cluster served no /metrics".to_string(),
        Some(addr) => format!("WARNING: the \"off\" cluster served /metrics at {addr}"),
    };
    let recorded = |text: &str, name: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let on = match on.metrics.as_deref().map(crate::cpu::scrape) {
        Some(Ok(text)) => format!(
            "the \"on\" cluster recorded {:.0} NBD request latencies and {:.0} OSD store \
             write latencies",
            recorded(&text, "basalt_frontend_request_seconds_count"),
            recorded(&text, "basalt_osd_store_write_seconds_count")
        ),
        Some(Err(e)) => format!("WARNING: the \"on\" cluster's /metrics: {e:#}"),
        None => "WARNING: the \"on\" cluster served no /metrics".into(),
    };
    format!("Checked after the runs: {off}; {on}.")
}

/// Per workload: IOPS and CPU per IO, metrics on vs off.
fn rows(figures: Vec<Vec<Figure>>) -> Vec<Row> {
    let mut rows = Vec::new();
    for (w, f) in WORKLOADS.iter().zip(figures) {
        let [off, on]: [Figure; 2] = match f.try_into() {
            Ok(a) => a,
            Err(_) => continue,
        };
        let cpu_us = |f: &Figure| Figure {
            value: f
                .cpu
                .as_ref()
                .and_then(|c| c.per_1000_ios)
                .map(|s| s * 1000.0),
            ..f.clone()
        };
        rows.push(Row {
            key: format!("{ID}_{}_iops", w.key),
            label: format!("{}, metrics on vs off", w.label),
            unit: "IOPS".into(),
            higher_is_better: true,
            baseline: Some(off.clone()),
            basalt: Some(on.clone()),
        });
        rows.push(Row {
            key: format!("{ID}_{}_cpu_us_per_io", w.key),
            label: format!("{}, CPU per IO, metrics on vs off", w.label),
            unit: "us".into(),
            higher_is_better: false,
            baseline: Some(cpu_us(&off)),
            basalt: Some(cpu_us(&on)),
        });
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::CpuCost;

    #[test]
    fn rows_compare_on_with_off_in_iops_and_cpu_per_io() {
        // Goal: per workload an IOPS row and a CPU µs/IO row, off as the baseline; a run
        // without CPU figures gives no CPU value rather than a zero.
        let fig = |iops: f64, cpu_s_per_1000: Option<f64>| Figure {
            value: Some(iops),
            cpu: cpu_s_per_1000.map(|c| CpuCost {
                per_1000_ios: Some(c),
                ..CpuCost::default()
            }),
            ..Figure::default()
        };
        let rows = rows(vec![
            vec![fig(1000.0, Some(0.02)), fig(990.0, Some(0.021))],
            vec![fig(500.0, None), fig(495.0, None)],
        ]);
        let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "metrics_randread_4k_qd32_iops",
                "metrics_randread_4k_qd32_cpu_us_per_io",
                "metrics_randwrite_4k_qd32_iops",
                "metrics_randwrite_4k_qd32_cpu_us_per_io",
            ]
        );
        assert_eq!(rows[0].baseline.as_ref().unwrap().value, Some(1000.0));
        assert_eq!(rows[0].basalt.as_ref().unwrap().value, Some(990.0));
        let cpu_on = rows[1].basalt.as_ref().unwrap().value.unwrap();
        assert!((cpu_on - 21.0).abs() < 1e-9, "{cpu_on}");
        assert!(!rows[1].higher_is_better);
        assert_eq!(rows[3].basalt.as_ref().unwrap().value, None);
    }
}
