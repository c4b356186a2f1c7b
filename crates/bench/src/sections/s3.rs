//! The LightningStor profile against the cluster's S3 gateway, driven by boto3: one large
//! object PUT and GET, then 32 objects of 4 MiB one after the other and with 8 concurrent
//! clients, each throughput beside the network baseline; then 4 KiB object PUT and GET rates
//! with 1 and with 16 client processes, 4 KiB PUT into a versioned bucket beside an
//! unversioned one, and a ListObjectsV2 walk over 100,000 keys; then the 4 KiB rates again
//! with the built-in Rust client ([`super::s3_load`]), cheap enough to measure the gateway.

use super::{s3_load, Ctx, Scale, Section};
use crate::results::{Figure, Row, SectionLayout, SectionReport, SectionStatus};
use std::process::Command;
use std::time::Duration;

/// The boto3 driver, written to the work directory at run time.
const DRIVER: &str = include_str!("s3_driver.py");
/// Longest run of the driver.
const DRIVER_TIMEOUT: Duration = Duration::from_secs(1800);

/// The S3 section.
pub struct S3Section {
    /// Sizes and durations: see [`Sizes::of`].
    pub scale: Scale,
}

/// What the boto3 driver measures at a scale (its SIZES table, which a test holds to this)
/// and how long the Rust client's phases are.
struct Sizes {
    /// MiB of the large object.
    big_mib: u32,
    /// 4 MiB objects PUT and GET.
    small_count: u32,
    /// Seconds of each 4 KiB phase (both clients).
    small_s: f64,
    /// Seconds of each versioning round (boto3).
    round_s: f64,
    /// Keys of the LIST bucket, as the report writes them.
    listed: &'static str,
    /// Keys per ListObjectsV2 page.
    list_page: u32,
}

impl Sizes {
    /// A full run; `Quick`: a 64 MiB large object, 8 of 4 MiB, 2 s phases, rounds of 1.5 s,
    /// 10,000 keys to list; `Smoke`: 16 MiB, 8 of 4 MiB, 0.5 s phases and rounds, 500 keys
    /// listed 100 a page (still five pages; filling the LIST bucket, one index update a key,
    /// was most of the section).
    fn of(scale: Scale) -> Sizes {
        let (big_mib, small_count, small_s, round_s, listed, list_page) = scale.pick(
            (16, 8, 0.5, 0.5, "500", 100),
            (64, 8, 2.0, 1.5, "10,000", 1000),
            (256, 32, 5.0, 3.0, "100,000", 1000),
        );
        Sizes {
            big_mib,
            small_count,
            small_s,
            round_s,
            listed,
            list_page,
        }
    }
}

/// (figure key in the driver's JSON, row label, unit, compared with the network).
fn rows(scale: Scale) -> Vec<(&'static str, String, &'static str, bool)> {
    let sizes = Sizes::of(scale);
    let (big, n, listed, page) = (
        sizes.big_mib,
        sizes.small_count,
        sizes.listed,
        sizes.list_page,
    );
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
        (
            "put_4k_unversioned_ops_s",
            "4 KiB PUT, 16 processes, unversioned bucket".into(),
            "ops/s",
            false,
        ),
        (
            "put_4k_versioned_ops_s",
            "4 KiB PUT, 16 processes, versioning Enabled".into(),
            "ops/s",
            false,
        ),
        (
            "put_4k_versioned_pct",
            "4 KiB PUT with versioning, % of unversioned".into(),
            "%",
            false,
        ),
        (
            "list_keys_s",
            format!("LIST of {listed} keys, {page} a page, one client"),
            "keys/s",
            false,
        ),
    ]
}

impl Section for S3Section {
    fn id(&self) -> &'static str {
        "s3"
    }

    fn plan(&self, _ctx: &Ctx) -> Vec<f64> {
        // Most of a full run is the untimed filling and emptying of the 100,000-key bucket;
        // the Rust client's four phases come with key generation and deletion.
        self.scale
            .pick(vec![25.0, 6.0], vec![50.0, 15.0], vec![270.0, 35.0])
    }

    fn run(&self, ctx: &mut Ctx) -> SectionReport {
        let sizes = Sizes::of(self.scale);
        let mut report = SectionReport {
            id: "s3".into(),
            title: "S3 object gateway (LightningStor profile)".into(),
            intro: format!(
                "boto3 (the AWS SDK for Python, default settings: CRC32 checksums of every \
                 upload) against the cluster's S3 gateway over loopback HTTP: one large \
                 object PUT then GET, then 4 MiB objects PUT then GET one after the other and \
                 with 8 concurrent clients; then 4 KiB objects PUT for {phase_s} s, then GET \
                 in turn for as long, by 1 and by 16 client processes (each its own boto3 \
                 client and keys, all started before the clock); then 4 KiB PUT by 16 \
                 processes into a bucket with versioning Enabled and into an unversioned one, \
                 in alternating rounds of {round_s} s; then one client's ListObjectsV2 walk, \
                 {page} keys a page, over {listed} empty keys PUT before the clock, which must \
                 return exactly those keys in order. Bodies are random, generated before the \
                 clock starts; every GET is compared with what was PUT. Then the 4 KiB PUT \
                 and GET phases again with the benchmark's own Rust client (rows marked \
                 Rust): 1 and 16 tasks on one thread, each with a keep-alive HTTP/1.1 \
                 connection, SigV4 with the body's SHA-256, the CPU of client and cluster \
                 read around each phase. The baseline is the network section's TCP \
                 throughput.",
                phase_s = sizes.small_s,
                round_s = sizes.round_s,
                listed = sizes.listed,
                page = sizes.list_page,
            ),
            baseline_name: "Network (TCP)".into(),
            status: SectionStatus::Measured,
            layout: SectionLayout::Comparison,
            notes: Vec::new(),
            rows: Vec::new(),
        };
        ctx.progress.step(
            "S3: large object, 4 MiB batches, 4 KiB rates, versioning and LIST with boto3",
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
        let flag = self.scale.pick(" --smoke", " --quick", "");
        cmd.args(flag.split_whitespace());
        let command = format!(
            "python3 s3_driver.py {} ACCESS SECRET s3.json{flag}",
            endpoint.url
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
        report.rows = report_rows(self.scale, &outcome, &command, baseline);
        if let Err(e) = &outcome {
            ctx.progress.note(&format!("failed: {e:#}"));
        }
        if let Some(e) = driver_error(&outcome) {
            ctx.progress.note(&format!("boto3 driver failed: {e}"));
            report.notes.push(format!("The boto3 driver failed: {e}"));
        }

        ctx.progress.step(
            "S3: 4 KiB PUT and GET with the built-in Rust client",
            self.plan(ctx)[1],
        );
        let sources = match &ctx.cluster {
            Ok(c) => c.cpu_sources(),
            Err(_) => Vec::new(),
        };
        let seconds = sizes.small_s;
        let load = s3_load::measure(&endpoint, &sources, seconds);
        let command = format!(
            "basalt bench storage (built-in S3 client: 1 and 16 tasks, {seconds} s a phase, \
             against {})",
            endpoint.url
        );
        if let Err(e) = serde_json::to_vec_pretty(&load)
            .map_err(anyhow::Error::from)
            .and_then(|json| Ok(std::fs::write(ctx.out_dir.join(s3_load::RAW), json)?))
        {
            ctx.progress
                .note(&format!("could not write {}: {e:#}", s3_load::RAW));
        }
        if let Some(e) = load.error.as_ref().or(load.cleanup_error.as_ref()) {
            ctx.progress.note(&format!("Rust client failed: {e}"));
        }
        report.rows.extend(s3_load::rows(&load, &command));
        report.notes.extend(s3_load::notes(&load));
        report
    }
}

/// The step the driver says failed; the figures it measured before that step stand.
fn driver_error(outcome: &anyhow::Result<serde_json::Value>) -> Option<String> {
    outcome
        .as_ref()
        .ok()
        .and_then(|v| v["error"].as_str())
        .map(String::from)
}

/// The section's table from the driver's outcome: every figure it reported; for every other
/// row, the step that failed (or why the driver gave nothing).
fn report_rows(
    scale: Scale,
    outcome: &anyhow::Result<serde_json::Value>,
    command: &str,
    baseline: Option<Figure>,
) -> Vec<Row> {
    let failed_step = driver_error(outcome);
    rows(scale)
        .into_iter()
        .map(|(key, label, unit, vs_network)| {
            let basalt = match outcome {
                Ok(v) => Figure {
                    value: v[key].as_f64(),
                    error: v[key].as_f64().is_none().then(|| {
                        failed_step
                            .clone()
                            .unwrap_or_else(|| "not reported".to_string())
                    }),
                    command: Some(command.into()),
                    raw: Some("raw/s3.json".into()),
                    ..Figure::default()
                },
                Err(e) => Figure::failed(format!("{e:#}"), Some(command.into()), None),
            };
            Row {
                key: key.trim_end_matches("_mib_s").trim_end_matches("_s").into(),
                label,
                unit: unit.into(),
                higher_is_better: true,
                baseline: if vs_network { baseline.clone() } else { None },
                basalt: Some(basalt),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_have_distinct_keys_and_rates_stand_alone() {
        // Goal: `compare` matches rows by key, so no two rows may share one; the 4 KiB rates,
        // the versioning ratio and the LIST rate are not throughput and must not be set beside
        // the network baseline; and each row reads a figure the driver writes.
        for scale in [Scale::Smoke, Scale::Quick, Scale::Full] {
            let rows = rows(scale);
            let mut keys: Vec<_> = rows
                .iter()
                .map(|r| r.0.trim_end_matches("_mib_s").trim_end_matches("_s"))
                .collect();
            keys.sort_unstable();
            keys.dedup();
            assert_eq!(keys.len(), rows.len());
            let alone: Vec<_> = rows
                .iter()
                .filter(|r| r.0.contains("_4k_") || r.0.starts_with("list_"))
                .collect();
            assert_eq!(alone.len(), 8);
            assert!(alone.iter().all(|r| !r.3));
            let units: Vec<_> = alone.iter().map(|r| r.2).collect();
            assert_eq!(units.iter().filter(|u| **u == "ops/s").count(), 6);
            assert!(units.contains(&"%") && units.contains(&"keys/s"));
            // The Rust client's rows sit in the same table: their keys must not collide.
            let rust = s3_load::rows(&s3_load::LoadOutcome::default(), "load");
            assert_eq!(rust.len(), 7);
            for row in &rust {
                assert!(!keys.contains(&row.key.as_str()), "{}", row.key);
                assert!(row.label.ends_with("(Rust)") && row.baseline.is_none());
            }
        }
        assert!(DRIVER.contains("f\"put_4k_{clients}c_ops_s\""));
        assert!(DRIVER.contains("f\"put_4k_{name}_ops_s\""));
        assert!(DRIVER.contains("((0, \"unversioned\"), (1, \"versioned\"))"));
        for key in ["put_4k_versioned_pct", "list_keys_s"] {
            assert!(DRIVER.contains(&format!("figures[\"{key}\"] =")), "{key}");
        }
    }

    #[test]
    fn the_report_states_the_sizes_the_driver_uses() {
        // Goal: the labels and the intro state what the driver ran: its SIZES entry of each
        // mode holds the figures of `Sizes::of` for that scale.
        for (mode, scale) in [
            ("smoke", Scale::Smoke),
            ("quick", Scale::Quick),
            ("full", Scale::Full),
        ] {
            let entry = DRIVER
                .split(&format!("\"{mode}\": {{"))
                .nth(1)
                .and_then(|rest| rest.split('}').next())
                .unwrap_or_else(|| panic!("no SIZES entry {mode}"));
            let s = Sizes::of(scale);
            for field in [
                format!("\"big_mib\": {}", s.big_mib),
                format!("\"small_count\": {}", s.small_count),
                format!("\"small_s\": {:?}", s.small_s),
                format!("\"versioning_round_s\": {:?}", s.round_s),
                format!("\"list_keys\": {}", s.listed.replace(',', "")),
                format!("\"list_page\": {}", s.list_page),
            ] {
                assert!(entry.contains(&field), "{mode}: {field} not in {entry}");
            }
        }
        assert!(rows(Scale::Smoke)
            .iter()
            .any(|r| r.1 == "LIST of 500 keys, 100 a page, one client"));
    }

    #[test]
    fn unmeasured_rows_name_the_failed_step() {
        // Goal: figures the driver measured before a failed step stand, and every row it did
        // not reach carries that step's error (a driver that wrote nothing: why).
        let outcome = Ok(serde_json::json!({
            "put_4k_unversioned_ops_s": 700.0,
            "put_4k_versioned_ops_s": 665.0,
            "put_4k_versioned_pct": 95.0,
            "error": "RuntimeError: the listing returned 99999 keys for 100000 PUT",
        }));
        let rows = report_rows(Scale::Full, &outcome, "python3 s3_driver.py", None);
        let basalt = |key: &str| {
            let row = rows.iter().find(|r| r.key == key).expect(key);
            row.basalt.clone().expect(key)
        };
        let pct = basalt("put_4k_versioned_pct");
        assert_eq!((pct.value, pct.error), (Some(95.0), None));
        let list = basalt("list_keys");
        assert_eq!(list.value, None);
        assert!(list
            .error
            .unwrap()
            .contains("the listing returned 99999 keys"));
        let list_row = rows.iter().find(|r| r.key == "list_keys").unwrap();
        assert_eq!(
            list_row.label,
            "LIST of 100,000 keys, 1000 a page, one client"
        );
        assert_eq!(list_row.unit, "keys/s");

        let rows = report_rows(Scale::Quick, &Ok(serde_json::json!({})), "driver", None);
        assert!(rows.iter().all(|r| {
            let f = r.basalt.as_ref().unwrap();
            f.value.is_none() && f.error.as_deref() == Some("not reported")
        }));
        assert!(rows
            .iter()
            .any(|r| r.label.starts_with("LIST of 10,000 keys")));

        let rows = report_rows(
            Scale::Full,
            &Err(anyhow::anyhow!("wrote no results")),
            "d",
            None,
        );
        assert!(rows.iter().all(|r| {
            let f = r.basalt.as_ref().unwrap();
            f.error.as_deref() == Some("wrote no results")
        }));
    }
}
