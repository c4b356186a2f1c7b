//! Object-backed volumes (issue 14) beside Alibaba's strmvol: an index built from a bucket
//! of 100,000 objects (1,000,000 with `BASALT_BENCH_STRMVOL_1M=1`), its time and peak RSS
//! against strmvol's published figures; concurrent random whole-file reads of small objects
//! through the NBD export; one stream reading a large object through the export against a
//! direct GET of it. Each index's objvol is then mounted by this host's kernel (nbdfuse,
//! loop, EROFS) and walked: every file stat'ed, a sample read back (root and nbdfuse needed;
//! otherwise a note says why those rows are missing).
//!
//! The buckets are filled by the lean Rust S3 client before any clock. The index build runs
//! in this process (the library `basalt objvol create` runs), so its peak RSS is this
//! process's high-water mark over the build, reset just before it (`/proc/self/clear_refs`);
//! `basalt objvol create` then builds and stores the objvols the reads use, through the
//! control API of the `basalt up` under test. Reads go through the bench's own NBD client,
//! one connection per reader, one request in flight each: a file is one read of its blocks.

//!
//! `buckets` holds what is PUT and how; `measure` what is timed; this module the section's
//! steps and rows.

mod buckets;
mod measure;

use super::{Ctx, Scale, Section};
use crate::results::{Figure, Row, SectionLayout, SectionReport, SectionStatus};
use crate::under_test::S3Endpoint;
use anyhow::{bail, Context};
use basalt_objvol::build::Built;
use buckets::{fill, index_key, pattern, put_large, small_body};
use measure::{
    build_index, get_large, list_one_stream, mount_and_walk, objvol_create, read_large, read_small,
    BuildFigures, Walk, WALK_SAMPLE,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Section id.
pub const ID: &str = "strmvol";
/// Set to 1 to also build from a bucket of a million objects (filling it takes minutes).
pub const MILLION_ENV: &str = "BASALT_BENCH_STRMVOL_1M";
/// Concurrent readers of the small-file rows, as strmvol's table.
pub const READERS: [usize; 4] = [4, 16, 64, 256];
/// Clients filling a bucket.
const FILL_CLIENTS: usize = 32;
/// Bytes of each object of the index buckets (the build reads none of them).
const INDEX_OBJECT_BYTES: usize = 256;
/// Buckets this large hold empty objects: a 256 B object takes a 4 KiB block on each of 3
/// replicas (12 GB for a million), more than this machine's disk can spare. Empty objects
/// list the same; the index has no extent record for them.
const EMPTY_FROM_OBJECTS: u64 = 1_000_000;
/// The small files: sizes spread evenly over 4 KiB ..= 128 KiB.
const SMALL_MIN_BYTES: usize = 4 << 10;
const SMALL_MAX_BYTES: usize = 128 << 10;
/// One NBD read of the large object.
const LARGE_READ_BYTES: usize = 1 << 20;
/// Rounds of the large read, alternating with the direct GET.
const LARGE_ROUNDS: usize = 3;
/// The region requests are signed for.
const REGION: &str = "us-east-1";
/// Longest `basalt objvol create`.
const CREATE_TIMEOUT: Duration = Duration::from_secs(1800);
/// strmvol's published build figures (seed report: ecs.g8i.2xlarge, EROFS):
/// (objects, seconds, peak MB).
const STRMVOL_BUILD: [(u64, f64, f64); 2] = [(100_000, 4.09, 125.0), (1_000_000, 11.07, 871.0)];

/// The section.
pub struct StrmvolSection {
    /// Bucket sizes and read durations (`Smoke`: still more than one page of listing).
    pub scale: Scale,
}

impl StrmvolSection {
    fn index_sizes(&self) -> Vec<u64> {
        let mut sizes = vec![self.scale.pick(2_000, 10_000, 100_000)];
        if std::env::var(MILLION_ENV).is_ok_and(|v| v == "1") {
            sizes.push(1_000_000);
        }
        sizes
    }

    fn small_files(&self) -> usize {
        self.scale.pick(100, 500, 2000)
    }

    fn large_bytes(&self) -> usize {
        self.scale.pick(16 << 20, 256 << 20, 1 << 30)
    }

    /// Bytes each OSD needs for the section's buckets: every object takes at least a
    /// slot of the bench cluster's 128 KiB objects (a quarter more for the index shards).
    pub fn store_bytes(&self) -> u64 {
        let stored: u64 = self
            .index_sizes()
            .iter()
            .filter(|n| **n < EMPTY_FROM_OBJECTS)
            .sum();
        let objects = stored + self.small_files() as u64;
        (objects * (128 << 10) + self.large_bytes() as u64) / 4 * 5
    }

    fn read_seconds(&self) -> f64 {
        self.scale.pick(0.5, 2.0, 5.0)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn figure(value: anyhow::Result<f64>, command: &str) -> Figure {
    match value {
        Ok(v) => Figure {
            value: Some(v),
            command: Some(command.into()),
            ..Figure::default()
        },
        Err(e) => Figure::failed(format!("{e:#}"), Some(command.into()), None),
    }
}

fn published(value: f64) -> Figure {
    Figure {
        value: Some(value),
        command: Some("strmvol's published figure (Alibaba, ecs.g8i.2xlarge)".into()),
        ..Figure::default()
    }
}

fn row(
    key: String,
    label: String,
    unit: &str,
    higher: bool,
    base: Option<Figure>,
    basalt: Figure,
) -> Row {
    Row {
        key,
        label,
        unit: unit.into(),
        higher_is_better: higher,
        baseline: base,
        basalt: Some(basalt),
    }
}

impl Section for StrmvolSection {
    fn id(&self) -> &'static str {
        ID
    }

    fn plan(&self, _ctx: &Ctx) -> Vec<f64> {
        let fill: f64 = self.index_sizes().iter().map(|n| *n as f64 / 2500.0).sum();
        vec![
            fill + 10.0,
            20.0 + self.read_seconds() * READERS.len() as f64,
            40.0,
        ]
    }

    fn run(&self, ctx: &mut Ctx) -> SectionReport {
        let mut report = self.empty_report();
        let plan = self.plan(ctx);
        let target = match FioTarget::of(ctx) {
            Ok(t) => t,
            Err(reason) => {
                report.status = SectionStatus::NotMeasured { reason };
                return report;
            }
        };
        let tmp = ctx.work_dir.join("strmvol");
        let _ = std::fs::create_dir_all(&tmp);
        ctx.progress
            .step("strmvol: fill buckets and build indexes", plan[0]);
        for n in self.index_sizes() {
            index_rows(ctx, &target, &tmp, n, &mut report);
        }
        ctx.progress
            .step("strmvol: concurrent small-file reads", plan[1]);
        self.small_file_rows(ctx, &target, &tmp, &mut report);
        ctx.progress
            .step("strmvol: one-stream large read vs direct GET", plan[2]);
        self.large_file_rows(ctx, &target, &mut report);
        report
    }
}

/// What the section measures through: the `basalt up` under test's S3 gateway, control
/// API and NBD address, and a runtime for the async clients.
struct FioTarget {
    endpoint: S3Endpoint,
    control: String,
    /// `IP:PORT` of the NBD server.
    nbd_addr: String,
    runtime: tokio::runtime::Runtime,
}

impl FioTarget {
    /// The target of `ctx`'s cluster, or why there is none.
    fn of(ctx: &Ctx) -> Result<FioTarget, String> {
        let (endpoint, control, uri) = match &ctx.cluster {
            Ok(c) => (c.s3(), c.control(), c.uri().to_string()),
            Err(_) => (None, None, String::new()),
        };
        let (Some(endpoint), Some(control)) = (endpoint, control) else {
            return Err("needs a local `basalt up` with its S3 gateway and control API".into());
        };
        let nbd_addr = uri
            .strip_prefix("nbd://")
            .and_then(|r| r.split('/').next())
            .unwrap_or_default()
            .to_string();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("no runtime: {e}"))?;
        Ok(FioTarget {
            endpoint,
            control,
            nbd_addr,
            runtime,
        })
    }
}

/// The rows of one index bucket of `n` objects: fill it and build its index in this
/// process (time, listing, rate, peak RSS), list it in one stream, `basalt objvol create`
/// it, then mount and walk it when this host can.
fn index_rows(ctx: &mut Ctx, t: &FioTarget, tmp: &Path, n: u64, report: &mut SectionReport) {
    let bucket = format!("strmvol-{n}");
    let body_bytes = if n >= EMPTY_FROM_OBJECTS {
        0
    } else {
        INDEX_OBJECT_BYTES
    };
    let label = if body_bytes == 0 {
        format!("{n} empty objects")
    } else {
        format!("{n} objects")
    };
    build_rows(ctx, t, tmp, n, body_bytes, &label, report);
    let create = objvol_create(&t.control, &bucket, &bucket);
    let created = create.is_ok();
    report.rows.push(row(
        format!("create_{n}_s"),
        format!("`basalt objvol create` (list, build, store), {label}"),
        "s",
        false,
        None,
        figure(
            create,
            &format!("basalt objvol create {bucket} --bucket {bucket}"),
        ),
    ));
    if !created {
        return;
    }
    if let Some(reason) = basalt_objvol::mount::unavailable_reason() {
        report.notes.push(format!(
            "{n} objects: the mount rows were not measured ({reason})."
        ));
        return;
    }
    mount_rows(ctx, t, tmp, n, body_bytes, &label, report);
}

/// Fill bucket `strmvol-N` with `n` objects of `body_bytes`, build its index in this
/// process and list it in one stream: the build and listing rows.
fn build_rows(
    ctx: &mut Ctx,
    t: &FioTarget,
    tmp: &Path,
    n: u64,
    body_bytes: usize,
    label: &str,
    report: &mut SectionReport,
) {
    let bucket = format!("strmvol-{n}");
    let command = format!(
        "basalt bench storage --sections strmvol (in-process build of {bucket}, {n} objects)"
    );
    let outcome = t
        .runtime
        .block_on(async {
            fill(
                &t.endpoint,
                &bucket,
                n as usize,
                Arc::new(move |i| (index_key(i as u64, n), pattern(i as u64, body_bytes))),
            )
            .await
            .context("fill the bucket")?;
            build_index(&t.endpoint, &bucket, tmp).await
        })
        .and_then(|(f, _)| {
            if f.files != n {
                bail!("the index holds {} files, not {n}", f.files);
            }
            Ok(f)
        });
    if let Err(e) = &outcome {
        ctx.progress.note(&format!("failed: {e:#}"));
    }
    if let Ok(b) = &outcome {
        report.notes.push(format!(
            "{n} objects: this process held {:.0} MiB before the build.",
            b.baseline_rss_bytes as f64 / (1 << 20) as f64
        ));
    }
    report
        .rows
        .extend(build_figure_rows(n, label, &outcome, &command));
    let one = t
        .runtime
        .block_on(list_one_stream(&t.endpoint, &bucket))
        .and_then(|(seconds, keys)| {
            if keys != n {
                bail!("the one-stream listing found {keys} keys, not {n}");
            }
            Ok(n as f64 / seconds)
        });
    report.rows.push(row(
        format!("list_{n}_keys_s"),
        format!("listing rate, split by key ranges (vs one stream), {label}"),
        "keys/s",
        true,
        Some(figure(
            one,
            &format!("{command}: ListObjectsV2 pages in one stream"),
        )),
        figure(
            match &outcome {
                Ok(b) => Ok(b.files as f64 / b.listing_seconds),
                Err(e) => Err(anyhow::anyhow!("{e:#}")),
            },
            &command,
        ),
    ));
}

/// The rows of one index build's `outcome` (its figures, or why there are none), beside
/// strmvol's published figures for the same object count.
fn build_figure_rows(
    n: u64,
    label: &str,
    outcome: &anyhow::Result<BuildFigures>,
    command: &str,
) -> Vec<Row> {
    let published_row = STRMVOL_BUILD.iter().find(|(m, _, _)| *m == n);
    let get = |f: fn(&BuildFigures) -> f64| match outcome {
        Ok(b) => Ok(f(b)),
        Err(e) => Err(anyhow::anyhow!("{e:#}")),
    };
    vec![
        row(
            format!("build_{n}_s"),
            format!("index build, {label}"),
            "s",
            false,
            published_row.map(|p| published(p.1)),
            figure(get(|b| b.seconds), command),
        ),
        row(
            format!("build_{n}_listing_s"),
            format!("… of which waiting for the listing, {label}"),
            "s",
            false,
            None,
            figure(get(|b| b.listing_seconds), command),
        ),
        row(
            format!("build_{n}_objects_s"),
            format!("index build rate, {label}"),
            "objects/s",
            true,
            published_row.map(|p| published(n as f64 / p.1)),
            figure(get(|b| b.files as f64 / b.seconds), command),
        ),
        row(
            format!("build_{n}_rss_mb"),
            format!("index build peak RSS, {label}"),
            "MB",
            false,
            published_row.map(|p| published(p.2)),
            figure(get(|b| b.peak_rss_bytes as f64 / 1e6), command),
        ),
    ]
}

/// Mount objvol `strmvol-N` with this host's kernel and walk it: the mount rows.
fn mount_rows(
    ctx: &mut Ctx,
    t: &FioTarget,
    tmp: &Path,
    n: u64,
    body_bytes: usize,
    label: &str,
    report: &mut SectionReport,
) {
    let uri = format!("nbd://{}/objvol:strmvol-{n}", t.nbd_addr);
    let walk = mount_and_walk(&uri, &tmp.join(format!("mount-{n}")), n, body_bytes);
    if let Err(e) = &walk {
        ctx.progress.note(&format!("failed: {e:#}"));
    }
    let command = format!(
        "mount {uri} (nbdfuse, loop, mount -t erofs), then stat every file and read \
         {WALK_SAMPLE} of them"
    );
    let get = |f: fn(&Walk) -> f64| match &walk {
        Ok(w) => Ok(f(w)),
        Err(e) => Err(anyhow::anyhow!("{e:#}")),
    };
    report.rows.push(row(
        format!("mount_{n}_walk_s"),
        format!("mount and walk every file of the objvol, {label}"),
        "s",
        false,
        None,
        figure(get(|w| w.seconds), &command),
    ));
    report.rows.push(row(
        format!("mount_{n}_files_s"),
        format!("files stat'ed per second in that walk, {label}"),
        "files/s",
        true,
        None,
        figure(get(|w| w.files as f64 / w.walk_seconds), &command),
    ));
}

impl StrmvolSection {
    /// The report before any figure: what the section measures and how.
    fn empty_report(&self) -> SectionReport {
        SectionReport {
            id: ID.into(),
            title: "Object-backed volumes (issue 14) beside strmvol".into(),
            intro: format!(
                "An objvol is an S3 bucket served as a read-only EROFS filesystem over NBD. \
                 Index build: a bucket of N objects (keys train/class-CCCC/img-NNNNNNNN.jpg, \
                 {INDEX_OBJECT_BYTES} B each, PUT by the bench's Rust client before the \
                 clock) listed from the cluster's gateway and written as an EROFS index and \
                 extent map, in this process (the library `basalt objvol create` runs); peak \
                 RSS is the rise of this process's high-water mark over the build. The \
                 baseline is strmvol's published figure (a different machine: an 8-vCPU \
                 ecs.g8i.2xlarge against OSS). Small files: {} objects of 4–128 KiB, read \
                 whole and at random through the objvol's NBD export by 4 to 256 readers \
                 (one NBD connection each, one read per file, every byte checked). Large \
                 file: one object read in 1 MiB requests, one at a time, through the export, \
                 against one GET of it from the gateway (median of {LARGE_ROUNDS} \
                 alternating rounds).",
                self.small_files()
            ),
            baseline_name: "strmvol / direct GET".into(),
            status: SectionStatus::Measured,
            layout: SectionLayout::Comparison,
            notes: Vec::new(),
            rows: Vec::new(),
        }
    }

    /// Fill bucket `strmvol-files` with the small files, make it an objvol, and read random
    /// whole files through its export with each count of [`READERS`].
    fn small_file_rows(
        &self,
        ctx: &mut Ctx,
        t: &FioTarget,
        tmp: &Path,
        report: &mut SectionReport,
    ) {
        let files = self.small_files();
        let prepared = t.runtime.block_on(async {
            fill(
                &t.endpoint,
                "strmvol-files",
                files,
                Arc::new(|i: usize| (format!("img/{i:06}.jpg"), small_body(i))),
            )
            .await
            .context("fill the bucket")?;
            let (_, mut built) = build_index(&t.endpoint, "strmvol-files", tmp).await?;
            let placed = placed_small_files(&mut built, files)?;
            tokio::task::block_in_place(|| {
                objvol_create(&t.control, "strmvol-files", "strmvol-files")
            })?;
            anyhow::Ok(Arc::new(placed))
        });
        for readers in READERS {
            let command = format!(
                "basalt bench storage --sections strmvol ({readers} readers of \
                 objvol:strmvol-files over NBD, {} s)",
                self.read_seconds()
            );
            let reads = match &prepared {
                Ok(placed) => t.runtime.block_on(read_small(
                    &t.nbd_addr,
                    "objvol:strmvol-files",
                    placed.clone(),
                    readers,
                    self.read_seconds(),
                )),
                Err(e) => Err(anyhow::anyhow!("{e:#}")),
            };
            if let Err(e) = &reads {
                ctx.progress.note(&format!("failed: {e:#}"));
            }
            let (rate, mib) = match reads {
                Ok(r) => (
                    Ok(r.files as f64 / r.seconds),
                    Ok(r.bytes as f64 / r.seconds / (1 << 20) as f64),
                ),
                Err(e) => (Err(anyhow::anyhow!("{e:#}")), Err(e)),
            };
            report.rows.push(row(
                format!("small_{readers}_files_s"),
                format!("small files (4–128 KiB), {readers} readers"),
                "files/s",
                true,
                None,
                figure(rate, &command),
            ));
            report.rows.push(row(
                format!("small_{readers}_mib_s"),
                format!("small files (4–128 KiB), {readers} readers"),
                "MiB/s",
                true,
                None,
                figure(mib, &command),
            ));
        }
    }

    /// PUT one large object, make it an objvol, and read it through the export against a
    /// direct GET, alternating ([`LARGE_ROUNDS`] rounds, medians).
    fn large_file_rows(&self, ctx: &mut Ctx, t: &FioTarget, report: &mut SectionReport) {
        let size = self.large_bytes();
        let command = format!(
            "basalt bench storage --sections strmvol ({} MiB object: 1 MiB NBD reads through \
             objvol:strmvol-large vs one GET)",
            size >> 20
        );
        let large = t.runtime.block_on(async {
            let sha = put_large(&t.endpoint, size).await?;
            tokio::task::block_in_place(|| {
                objvol_create(&t.control, "strmvol-large", "strmvol-large")
            })?;
            let start = basalt_objvol::erofs::DATA_START_BLOCK;
            let (mut via_nbd, mut direct) = (Vec::new(), Vec::new());
            for _ in 0..LARGE_ROUNDS {
                direct.push(get_large(&t.endpoint, "strmvol-large", "model.bin", size).await?);
                via_nbd.push(
                    read_large(&t.nbd_addr, "objvol:strmvol-large", start, size, &sha).await?,
                );
            }
            Ok((median(via_nbd), median(direct)))
        });
        if let Err(e) = &large {
            ctx.progress.note(&format!("failed: {e:#}"));
        }
        let mib = size as f64 / (1 << 20) as f64;
        let (nbd, direct) = match large {
            Ok((n, d)) => (Ok(mib / n), Ok(mib / d)),
            Err(e) => (Err(anyhow::anyhow!("{e:#}")), Err(e)),
        };
        report.rows.push(Row {
            key: "large_read_mib_s".into(),
            label: format!(
                "one-stream read of a {} MiB object (objvol vs direct GET)",
                size >> 20
            ),
            unit: "MiB/s".into(),
            higher_is_better: true,
            baseline: Some(figure(direct, &command)),
            basalt: Some(figure(nbd, &command)),
        });
    }
}

/// Where the index of `strmvol-files` placed each of its `files` small files: (first
/// device block, size, file number); every file must be there.
fn placed_small_files(built: &mut Built, files: usize) -> anyhow::Result<Vec<(u64, usize, usize)>> {
    let map = built.extent_map()?;
    let placed: Vec<(u64, usize, usize)> = map
        .objects()
        .map(|(start, size, key)| {
            let i = std::str::from_utf8(key)
                .ok()
                .and_then(|k| k.strip_prefix("img/")?.strip_suffix(".jpg")?.parse().ok())
                .unwrap_or(usize::MAX);
            (start, size as usize, i)
        })
        .collect();
    if placed.len() != files || placed.iter().any(|p| p.2 >= files) {
        bail!("the index maps {} of the {files} files", placed.len());
    }
    Ok(placed)
}
