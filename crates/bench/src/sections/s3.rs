//! The LightningStor profile against the cluster's S3 gateway, driven by boto3: one large
//! object PUT and GET, then 32 objects of 4 MiB one after the other and with 8 concurrent
//! clients, each throughput beside the network baseline; then 4 KiB object PUT and GET rates
//! with 1 and with 16 client processes.

use super::{Ctx, Section};
use crate::results::{Figure, Layout, Row, SectionReport, SectionStatus};
use std::process::Command;
use std::time::Duration;

/// The boto3 driver, written to the work directory at run time.
const DRIVER: &str = include_str!("s3_driver.py");
/// Longest run of the driver.
const DRIVER_TIMEOUT: Duration = Duration::from_secs(900);

/// The S3 section.
pub struct S3Section {
    /// `--quick`: a 64 MiB large object, 8 of 4 MiB, and 2 s (not 5 s) per 4 KiB phase.
    pub quick: bool,
}

/// (figure key in the driver's JSON, row label, unit, compared with the network).
fn rows(quick: bool) -> Vec<(&'static str, String, &'static str, bool)> {
    let (big, n) = if quick { (64, 8) } else { (256, 32) };
    vec![
        (
            "put_big_mib_s",
            format!("{big} MiB object PUT"),
            "MiB/s",
            true,
        ),
        (
            "get_big_mib_s",
            format!("{big} MiB object GET"),
            "MiB/s",
            true,
        ),
        (
            "put_seq_mib_s",
            format!("{n} × 4 MiB PUT, one client"),
            "MiB/s",
            true,
        ),
        (
            "get_seq_mib_s",
            format!("{n} × 4 MiB GET, one client"),
            "MiB/s",
            true,
        ),
        (
            "put_seq_obj_s",
            format!("{n} × 4 MiB PUT rate, one client"),
            "objects/s",
            false,
        ),
        (
            "get_seq_obj_s",
            format!("{n} × 4 MiB GET rate, one client"),
            "objects/s",
            false,
        ),
        (
            "put_par_mib_s",
            format!("{n} × 4 MiB PUT, 8 clients"),
            "MiB/s",
            true,
        ),
        (
            "get_par_mib_s",
            format!("{n} × 4 MiB GET, 8 clients"),
            "MiB/s",
            true,
        ),
        (
            "put_par_obj_s",
            format!("{n} × 4 MiB PUT rate, 8 clients"),
            "objects/s",
            false,
        ),
        (
            "get_par_obj_s",
            format!("{n} × 4 MiB GET rate, 8 clients"),
            "objects/s",
            false,
        ),
        (
            "put_4k_1c_ops_s",
            "4 KiB PUT, one client".into(),
            "ops/s",
            false,
        ),
        (
            "get_4k_1c_ops_s",
            "4 KiB GET, one client".into(),
            "ops/s",
            false,
        ),
        (
            "put_4k_16c_ops_s",
            "4 KiB PUT, 16 client processes".into(),
            "ops/s",
            false,
        ),
        (
            "get_4k_16c_ops_s",
            "4 KiB GET, 16 client processes".into(),
            "ops/s",
            false,
        ),
    ]
}

impl Section for S3Section {
    fn id(&self) -> &'static str {
        "s3"
    }

    fn plan(&self, _ctx: &Ctx) -> Vec<f64> {
        vec![if self.quick { 30.0 } else { 60.0 }]
    }

    fn run(&self, ctx: &mut Ctx) -> SectionReport {
        let mut report = SectionReport {
            id: "s3".into(),
            title: "S3 object gateway (LightningStor profile)".into(),
            intro: "boto3 (the AWS SDK for Python, default settings: CRC32 checksums of \
                    every upload) against the cluster's S3 gateway over loopback HTTP: one \
                    large object PUT then GET, then 4 MiB objects PUT then GET one after the \
                    other and with 8 concurrent clients; then 4 KiB objects PUT for a fixed \
                    time, then GET in turn for as long, by 1 and by 16 client processes \
                    (each its own boto3 client and keys, all started before the clock). \
                    Bodies are random, generated before the clock starts; every GET is \
                    compared with what was PUT. The baseline is the network section's TCP \
                    throughput."
                .into(),
            baseline_name: "Network (TCP)".into(),
            status: SectionStatus::Measured,
            layout: Layout::Comparison,
            notes: Vec::new(),
            rows: Vec::new(),
        };
        ctx.progress.step(
            "S3: large object, 4 MiB batches and 4 KiB rates with boto3",
            self.plan(ctx)[0],
        );
        let endpoint = match &ctx.cluster {
            Ok(c) => c.s3(),
            Err(_) => None,
        };
        let Some(endpoint) = endpoint else {
            report.status = SectionStatus::NotMeasured {
                reason: "the cluster under test has no S3 gateway the benchmark can reach \
                         (on an existing cluster, S3 is not measured yet)"
                    .into(),
            };
            return report;
        };
        let driver = ctx.work_dir.join("s3_driver.py");
        let json = ctx.raw_dir.join("s3.json");
        let mut cmd = Command::new("python3");
        cmd.arg(&driver)
            .arg(&endpoint.url)
            .arg(&endpoint.access_key)
            .arg(&endpoint.secret_key)
            .arg(&json);
        if self.quick {
            cmd.arg("--quick");
        }
        let command = format!(
            "python3 s3_driver.py {} ACCESS SECRET s3.json{}",
            endpoint.url,
            if self.quick { " --quick" } else { "" }
        );
        // A stale file must not pass for this run's results.
        let _ = std::fs::remove_file(&json);
        let outcome = std::fs::write(&driver, DRIVER)
            .map_err(anyhow::Error::from)
            .and_then(|_| super::network::run_bounded(&mut cmd, DRIVER_TIMEOUT))
            .and_then(|_| {
                let text = std::fs::read_to_string(&json).map_err(|e| {
                    anyhow::anyhow!(
                        "the boto3 driver wrote no results ({e}); is boto3 installed? \
                         (python3 -m pip install boto3)"
                    )
                })?;
                Ok(serde_json::from_str::<serde_json::Value>(&text)?)
            });
        let baseline = ctx.network_mib_s.map(|v| Figure {
            value: Some(v),
            command: Some("network section".into()),
            ..Figure::default()
        });
        // The driver names the step that failed; the figures measured before it stand.
        let driver_error = outcome
            .as_ref()
            .ok()
            .and_then(|v| v["error"].as_str())
            .map(String::from);
        for (key, label, unit, vs_network) in rows(self.quick) {
            let basalt = match &outcome {
                Ok(v) => Figure {
                    value: v[key].as_f64(),
                    error: v[key].as_f64().is_none().then(|| {
                        driver_error
                            .clone()
                            .unwrap_or_else(|| "not reported".to_string())
                    }),
                    command: Some(command.clone()),
                    raw: Some("raw/s3.json".into()),
                    ..Figure::default()
                },
                Err(e) => Figure::failed(format!("{e:#}"), Some(command.clone()), None),
            };
            report.rows.push(Row {
                key: key.trim_end_matches("_mib_s").trim_end_matches("_s").into(),
                label,
                unit: unit.into(),
                higher_is_better: true,
                baseline: if vs_network { baseline.clone() } else { None },
                basalt: Some(basalt),
            });
        }
        if let Err(e) = &outcome {
            ctx.progress.note(&format!("failed: {e:#}"));
        }
        if let Some(e) = driver_error {
            ctx.progress.note(&format!("boto3 driver failed: {e}"));
            report.notes.push(format!("The boto3 driver failed: {e}"));
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_have_distinct_keys_and_rates_stand_alone() {
        // Goal: `compare` matches rows by key, so no two rows may share one; the 4 KiB rates
        // are not throughput and must not be set beside the network baseline.
        for quick in [false, true] {
            let rows = rows(quick);
            let mut keys: Vec<_> = rows
                .iter()
                .map(|r| r.0.trim_end_matches("_mib_s").trim_end_matches("_s"))
                .collect();
            keys.sort_unstable();
            keys.dedup();
            assert_eq!(keys.len(), rows.len());
            let small: Vec<_> = rows.iter().filter(|r| r.0.contains("_4k_")).collect();
            assert_eq!(small.len(), 4);
            assert!(small.iter().all(|r| r.2 == "ops/s" && !r.3));
            assert!(DRIVER.contains("f\"put_4k_{clients}c_ops_s\""));
        }
    }
}
