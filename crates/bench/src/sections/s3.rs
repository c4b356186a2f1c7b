//! The LightningStor profile against the cluster's S3 gateway, driven by boto3: one large
//! object PUT and GET, then 32 objects of 4 MiB one after the other and with 8 concurrent
//! clients, each throughput beside the network baseline.

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
    /// `--quick`: a 64 MiB large object and 8 small ones.
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
    ]
}

impl Section for S3Section {
    fn id(&self) -> &'static str {
        "s3"
    }

    fn plan(&self, _ctx: &Ctx) -> Vec<f64> {
        vec![if self.quick { 15.0 } else { 45.0 }]
    }

    fn run(&self, ctx: &mut Ctx) -> SectionReport {
        let mut report = SectionReport {
            id: "s3".into(),
            title: "S3 object gateway (LightningStor profile)".into(),
            intro: "boto3 (the AWS SDK for Python, default settings: CRC32 checksums of \
                    every upload) against the cluster's S3 gateway over loopback HTTP: one \
                    large object PUT then GET, then 4 MiB objects PUT then GET one after the \
                    other and with 8 concurrent clients. Bodies are random, generated before \
                    the clock starts; every GET is compared with what was PUT. The baseline \
                    is the network section's TCP throughput."
                .into(),
            baseline_name: "Network (TCP)".into(),
            status: SectionStatus::Measured,
            layout: Layout::Comparison,
            notes: Vec::new(),
            rows: Vec::new(),
        };
        ctx.progress.step(
            "S3: large object and 4 MiB batches with boto3",
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
        for (key, label, unit, vs_network) in rows(self.quick) {
            let basalt = match &outcome {
                Ok(v) => Figure {
                    value: v[key].as_f64(),
                    error: v[key]
                        .as_f64()
                        .is_none()
                        .then(|| "not reported".to_string()),
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
        report
    }
}
