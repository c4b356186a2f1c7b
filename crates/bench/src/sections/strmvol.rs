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

use super::{Ctx, Section};
use crate::nbdclient::NbdConnection;
use crate::results::{Figure, Layout, Row, SectionReport, SectionStatus};
use crate::under_test::S3Endpoint;
use anyhow::{bail, Context};
use basalt_objvol::build::{build, Built};
use basalt_objvol::s3::{Credentials, S3Source};
use basalt_s3client::{Connection, Signer, EMPTY_SHA256};
use sha2::{Digest, Sha256};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Smaller buckets and shorter phases.
    pub quick: bool,
}

impl StrmvolSection {
    fn index_sizes(&self) -> Vec<u64> {
        let mut sizes = vec![if self.quick { 10_000 } else { 100_000 }];
        if std::env::var(MILLION_ENV).is_ok_and(|v| v == "1") {
            sizes.push(1_000_000);
        }
        sizes
    }

    fn small_files(&self) -> usize {
        if self.quick {
            500
        } else {
            2000
        }
    }

    fn large_bytes(&self) -> usize {
        if self.quick {
            256 << 20
        } else {
            1 << 30
        }
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
        if self.quick {
            2.0
        } else {
            5.0
        }
    }
}

/// The key of index object `i`: a training set's shape, 1,000 classes.
fn index_key(i: u64, n: u64) -> String {
    let per_class = n.div_ceil(1000).max(1);
    format!("train/class-{:04}/img-{i:08}.jpg", i / per_class)
}

/// Size and bytes of small file `i` (a pure function of `i`, so reads can be checked).
fn small_body(i: usize) -> Vec<u8> {
    let span = SMALL_MAX_BYTES - SMALL_MIN_BYTES;
    let size = SMALL_MIN_BYTES + (i.wrapping_mul(7919) % (span + 1));
    pattern(i as u64, size)
}

/// `len` bytes determined by `seed` (xorshift).
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The high-water mark of this process's RSS, reset to the current RSS; (current, peak)
/// in bytes after the reset.
fn reset_peak_rss() -> anyhow::Result<u64> {
    std::fs::write("/proc/self/clear_refs", "5").context("reset the peak RSS")?;
    Ok(status_kib("VmRSS", |s| s.vmrss)? * 1024)
}

fn peak_rss() -> anyhow::Result<u64> {
    Ok(status_kib("VmHWM", |s| s.vmhwm)? * 1024)
}

/// A kB field of /proc/self/status.
fn status_kib(
    name: &str,
    field: impl Fn(&procfs::process::Status) -> Option<u64>,
) -> anyhow::Result<u64> {
    let status = procfs::process::Process::myself()
        .and_then(|p| p.status())
        .context("read /proc/self/status")?;
    field(&status).with_context(|| format!("no {name} in /proc/self/status"))
}

/// One S3 connection of `endpoint`.
fn connection(endpoint: &S3Endpoint) -> anyhow::Result<Connection> {
    let addr = endpoint
        .url
        .strip_prefix("http://")
        .context("the S3 endpoint is not http://")?;
    Ok(Connection::new(
        addr,
        &Signer::new(&endpoint.access_key, &endpoint.secret_key, REGION),
    ))
}

async fn create_bucket(endpoint: &S3Endpoint, bucket: &str) -> anyhow::Result<()> {
    let mut c = connection(endpoint)?;
    let status = c
        .send("PUT", &format!("/{bucket}"), "", &[], &[], EMPTY_SHA256)
        .await?;
    if status != 200 {
        bail!(
            "CreateBucket {bucket} answered {status}: {}",
            c.body_excerpt()
        );
    }
    Ok(())
}

/// PUT `n` objects, key and body of object `i` from `object(i)`, by [`FILL_CLIENTS`].
async fn fill(
    endpoint: &S3Endpoint,
    bucket: &str,
    n: usize,
    object: Arc<dyn Fn(usize) -> (String, Vec<u8>) + Send + Sync>,
) -> anyhow::Result<()> {
    create_bucket(endpoint, bucket).await?;
    let mut tasks = Vec::new();
    for t in 0..FILL_CLIENTS {
        let mut c = connection(endpoint)?;
        let (bucket, object) = (bucket.to_string(), object.clone());
        tasks.push(tokio::spawn(async move {
            for i in (t..n).step_by(FILL_CLIENTS) {
                let (key, body) = object(i);
                let sha = hex::encode(Sha256::digest(&body));
                let path = format!("/{bucket}/{key}");
                let status = c.send("PUT", &path, "", &[], &body, &sha).await?;
                if status != 200 {
                    bail!("PUT {path} answered {status}: {}", c.body_excerpt());
                }
            }
            Ok(())
        }));
    }
    for t in tasks {
        t.await.context("a filling task")??;
    }
    Ok(())
}

/// What one in-process index build measured.
struct BuildFigures {
    seconds: f64,
    listing_seconds: f64,
    peak_rss_bytes: u64,
    baseline_rss_bytes: u64,
    files: u64,
}

async fn build_index(
    endpoint: &S3Endpoint,
    bucket: &str,
    tmp: &std::path::Path,
) -> anyhow::Result<(BuildFigures, Built)> {
    let credentials = Credentials {
        access_key: endpoint.access_key.clone(),
        secret_key: endpoint.secret_key.clone(),
    };
    let source = S3Source::new(&endpoint.url, bucket, &credentials)?;
    let baseline = reset_peak_rss()?;
    let started = Instant::now();
    let built = build(Arc::new(source), "", tmp, 1_700_000_000, &|_| {}).await?;
    let seconds = started.elapsed().as_secs_f64();
    let peak = peak_rss()?;
    Ok((
        BuildFigures {
            seconds,
            listing_seconds: built.listing.as_secs_f64(),
            peak_rss_bytes: peak.saturating_sub(baseline),
            baseline_rss_bytes: baseline,
            files: built.summary.files,
        },
        built,
    ))
}

/// Seconds to list `bucket` in one stream of pages (StartAfter the last key), as the build
/// did before it split the listing: the reference for the split listing. Returns the keys.
async fn list_one_stream(endpoint: &S3Endpoint, bucket: &str) -> anyhow::Result<(f64, u64)> {
    use basalt_objvol::build::Lister;
    let credentials = Credentials {
        access_key: endpoint.access_key.clone(),
        secret_key: endpoint.secret_key.clone(),
    };
    let source = S3Source::new(&endpoint.url, bucket, &credentials)?;
    let started = Instant::now();
    let (mut keys, mut after) = (0u64, None::<String>);
    // Bound: every page moves past its last key; the bucket is finite.
    loop {
        let page = source.page("", after.as_deref()).await?;
        keys += page.objects.len() as u64;
        after = page.objects.last().map(|o| o.key.clone());
        if !page.more || after.is_none() {
            return Ok((started.elapsed().as_secs_f64(), keys));
        }
    }
}

/// `basalt objvol create NAME --bucket BUCKET` against the `basalt up` under test (its
/// seconds); its stderr is the error if it fails.
fn objvol_create(control: &str, name: &str, bucket: &str) -> anyhow::Result<f64> {
    let exe = std::env::current_exe().context("find the basalt executable")?;
    let started = Instant::now();
    let mut cmd = Command::new(exe);
    cmd.args([
        "objvol",
        "create",
        name,
        "--bucket",
        bucket,
        "--control",
        control,
    ]);
    super::run_ok(&mut cmd, CREATE_TIMEOUT)
        .with_context(|| format!("basalt objvol create {name}"))?;
    Ok(started.elapsed().as_secs_f64())
}

/// Files of an index bucket read back (and compared) after the walk of its mount.
const WALK_SAMPLE: u64 = 64;

/// What a walk of a mounted objvol saw.
struct Walk {
    /// Mount, walk and sample reads.
    seconds: f64,
    /// The walk alone.
    walk_seconds: f64,
    files: u64,
}

/// Mounts the objvol at `uri` with the kernel's EROFS, stats every file (there must be `n`
/// of `body_bytes` each), reads [`WALK_SAMPLE`] of them back against what was PUT, unmounts.
fn mount_and_walk(
    uri: &str,
    dir: &std::path::Path,
    n: u64,
    body_bytes: usize,
) -> anyhow::Result<Walk> {
    let started = Instant::now();
    let mount = basalt_objvol::mount::KernelMount::new(uri, dir)?;
    let root = mount.path().to_path_buf();
    let walk_started = Instant::now();
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut todo = vec![root.clone()];
    // Bound: a finite read-only tree.
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("read {}", d.display()))? {
            let e = e?;
            let meta = std::fs::symlink_metadata(e.path())?;
            if meta.is_dir() {
                todo.push(e.path());
            } else {
                files += 1;
                bytes += meta.len();
            }
        }
    }
    let walk_seconds = walk_started.elapsed().as_secs_f64();
    if files != n || bytes != n * body_bytes as u64 {
        bail!("the mount holds {files} files of {bytes} B, not {n} of {body_bytes} B");
    }
    for k in 0..WALK_SAMPLE.min(n) {
        let i = k * n / WALK_SAMPLE.min(n);
        let path = root.join(index_key(i, n));
        let data = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
        if data != pattern(i, body_bytes) {
            bail!("{} does not hold what was PUT", path.display());
        }
    }
    mount.unmount();
    Ok(Walk {
        seconds: started.elapsed().as_secs_f64(),
        walk_seconds,
        files,
    })
}

/// What the readers of one row did.
struct Reads {
    files: u64,
    bytes: u64,
    seconds: f64,
}

/// `readers` tasks reading random whole small files through the export for `seconds`,
/// each checked against what was PUT.
async fn read_small(
    addr: &str,
    export: &str,
    files: Arc<Vec<(u64, usize, usize)>>,
    readers: usize,
    seconds: f64,
) -> anyhow::Result<Reads> {
    let mut conns = Vec::with_capacity(readers);
    for _ in 0..readers {
        conns.push(NbdConnection::connect(addr, export).await?);
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for (r, mut conn) in conns.into_iter().enumerate() {
        let files = files.clone();
        tasks.push(tokio::spawn(async move {
            let (mut n, mut bytes) = (0u64, 0u64);
            let mut x = (r as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D);
            let mut buf = vec![0u8; SMALL_MAX_BYTES];
            while Instant::now() < deadline {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let (start_block, size, i) = files[(x % files.len() as u64) as usize];
                let blocks = size.div_ceil(4096) * 4096;
                conn.read(start_block * 4096, &mut buf[..blocks]).await?;
                if buf[..size] != small_body(i)[..] {
                    bail!("file {i} read through the export differs from the object");
                }
                n += 1;
                bytes += size as u64;
            }
            conn.close().await;
            Ok::<_, anyhow::Error>((n, bytes))
        }));
    }
    let (mut files_read, mut bytes) = (0, 0);
    for t in tasks {
        let (n, b) = t.await.context("a reader")??;
        files_read += n;
        bytes += b;
    }
    Ok(Reads {
        files: files_read,
        bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Seconds to read `size` bytes at device block `start_block` through the export, one
/// request of [`LARGE_READ_BYTES`] at a time; the bytes' SHA-256 must be `sha`.
async fn read_large(
    addr: &str,
    export: &str,
    start_block: u64,
    size: usize,
    sha: &[u8],
) -> anyhow::Result<f64> {
    let mut conn = NbdConnection::connect(addr, export).await?;
    let mut buf = vec![0u8; LARGE_READ_BYTES];
    let mut hash = Sha256::new();
    let started = Instant::now();
    let mut at = 0usize;
    while at < size {
        let n = LARGE_READ_BYTES.min(size - at);
        let len = n.div_ceil(4096) * 4096;
        conn.read(start_block * 4096 + at as u64, &mut buf[..len])
            .await?;
        hash.update(&buf[..n]);
        at += n;
    }
    let seconds = started.elapsed().as_secs_f64();
    conn.close().await;
    if hash.finalize()[..] != *sha {
        bail!("the large object read through the export differs from the object");
    }
    Ok(seconds)
}

/// Seconds of one GET of the whole object, straight from the gateway.
async fn get_large(
    endpoint: &S3Endpoint,
    bucket: &str,
    key: &str,
    size: usize,
) -> anyhow::Result<f64> {
    let mut c = connection(endpoint)?;
    c.set_max_body(size);
    let started = Instant::now();
    let status = c
        .send(
            "GET",
            &format!("/{bucket}/{key}"),
            "",
            &[],
            &[],
            EMPTY_SHA256,
        )
        .await?;
    let seconds = started.elapsed().as_secs_f64();
    if status != 200 || c.body().len() != size {
        bail!(
            "GET {bucket}/{key} answered {status} with {} bytes",
            c.body().len()
        );
    }
    Ok(seconds)
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
        let mut report = SectionReport {
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
            layout: Layout::Comparison,
            notes: Vec::new(),
            rows: Vec::new(),
        };
        let plan = self.plan(ctx);
        let (endpoint, control, uri) = match &ctx.cluster {
            Ok(c) => (c.s3(), c.control(), c.uri().to_string()),
            Err(_) => (None, None, String::new()),
        };
        let (Some(endpoint), Some(control)) = (endpoint, control) else {
            report.status = SectionStatus::NotMeasured {
                reason: "needs a local `basalt up` with its S3 gateway and control API".into(),
            };
            return report;
        };
        let nbd_addr = uri
            .strip_prefix("nbd://")
            .and_then(|r| r.split('/').next())
            .unwrap_or_default()
            .to_string();
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                report.status = SectionStatus::NotMeasured {
                    reason: format!("no runtime: {e}"),
                };
                return report;
            }
        };
        let tmp = ctx.work_dir.join("strmvol");
        let _ = std::fs::create_dir_all(&tmp);

        // Index builds.
        ctx.progress
            .step("strmvol: fill buckets and build indexes", plan[0]);
        for n in self.index_sizes() {
            let bucket = format!("strmvol-{n}");
            let command = format!(
                "basalt bench storage --sections strmvol (in-process build of {bucket}, \
                 {n} objects)"
            );
            let total = n as usize;
            let body_bytes = if n >= EMPTY_FROM_OBJECTS {
                0
            } else {
                INDEX_OBJECT_BYTES
            };
            let outcome = runtime.block_on(async {
                fill(
                    &endpoint,
                    &bucket,
                    total,
                    Arc::new(move |i| (index_key(i as u64, n), pattern(i as u64, body_bytes))),
                )
                .await
                .context("fill the bucket")?;
                build_index(&endpoint, &bucket, &tmp).await
            });
            let outcome = outcome.and_then(|(f, _)| {
                if f.files != n {
                    bail!("the index holds {} files, not {n}", f.files);
                }
                Ok(f)
            });
            if let Err(e) = &outcome {
                ctx.progress.note(&format!("failed: {e:#}"));
            }
            let published_row = STRMVOL_BUILD.iter().find(|(m, _, _)| *m == n);
            let get = |f: fn(&BuildFigures) -> f64| match &outcome {
                Ok(b) => Ok(f(b)),
                Err(e) => Err(anyhow::anyhow!("{e:#}")),
            };
            if let Ok(b) = &outcome {
                report.notes.push(format!(
                    "{n} objects: this process held {:.0} MiB before the build.",
                    b.baseline_rss_bytes as f64 / (1 << 20) as f64
                ));
            }
            let label = if body_bytes == 0 {
                format!("{n} empty objects")
            } else {
                format!("{n} objects")
            };
            report.rows.push(row(
                format!("build_{n}_s"),
                format!("index build, {label}"),
                "s",
                false,
                published_row.map(|p| published(p.1)),
                figure(get(|b| b.seconds), &command),
            ));
            report.rows.push(row(
                format!("build_{n}_listing_s"),
                format!("… of which waiting for the listing, {label}"),
                "s",
                false,
                None,
                figure(get(|b| b.listing_seconds), &command),
            ));
            report.rows.push(row(
                format!("build_{n}_objects_s"),
                format!("index build rate, {label}"),
                "objects/s",
                true,
                published_row.map(|p| published(n as f64 / p.1)),
                figure(get(|b| b.files as f64 / b.seconds), &command),
            ));
            report.rows.push(row(
                format!("build_{n}_rss_mb"),
                format!("index build peak RSS, {label}"),
                "MB",
                false,
                published_row.map(|p| published(p.2)),
                figure(get(|b| b.peak_rss_bytes as f64 / 1e6), &command),
            ));
            let one = runtime
                .block_on(list_one_stream(&endpoint, &bucket))
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
                figure(get(|b| b.files as f64 / b.listing_seconds), &command),
            ));
            let create = objvol_create(&control, &bucket, &bucket);
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
                continue;
            }
            if let Some(reason) = basalt_objvol::mount::unavailable_reason() {
                report.notes.push(format!(
                    "{n} objects: the mount rows were not measured ({reason})."
                ));
                continue;
            }
            let uri = format!("nbd://{nbd_addr}/objvol:{bucket}");
            let walk = mount_and_walk(&uri, &tmp.join(format!("mount-{n}")), n, body_bytes);
            if let Err(e) = &walk {
                ctx.progress.note(&format!("failed: {e:#}"));
            }
            let command = format!(
                "mount {uri} (nbdfuse, loop, mount -t erofs), then stat every file and read \
                 {WALK_SAMPLE} of them"
            );
            let seconds = |w: &Walk| w.seconds;
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
                figure(get(seconds), &command),
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

        // Small files.
        ctx.progress
            .step("strmvol: concurrent small-file reads", plan[1]);
        let files = self.small_files();
        let prepared = runtime.block_on(async {
            fill(
                &endpoint,
                "strmvol-files",
                files,
                Arc::new(|i: usize| (format!("img/{i:06}.jpg"), small_body(i))),
            )
            .await
            .context("fill the bucket")?;
            let (_, mut built) = build_index(&endpoint, "strmvol-files", &tmp).await?;
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
            tokio::task::block_in_place(|| {
                objvol_create(&control, "strmvol-files", "strmvol-files")
            })?;
            Ok(Arc::new(placed))
        });
        for readers in READERS {
            let command = format!(
                "basalt bench storage --sections strmvol ({readers} readers of objvol:strmvol-files \
                 over NBD, {} s)",
                self.read_seconds()
            );
            let reads = match &prepared {
                Ok(placed) => runtime.block_on(read_small(
                    &nbd_addr,
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

        // One large file.
        ctx.progress
            .step("strmvol: one-stream large read vs direct GET", plan[2]);
        let size = self.large_bytes();
        let command = format!(
            "basalt bench storage --sections strmvol ({} MiB object: 1 MiB NBD reads through \
             objvol:strmvol-large vs one GET)",
            size >> 20
        );
        let large = runtime.block_on(async {
            let body = pattern(u64::MAX, size);
            let sha = Sha256::digest(&body).to_vec();
            create_bucket(&endpoint, "strmvol-large").await?;
            let mut c = connection(&endpoint)?;
            let status = c
                .send(
                    "PUT",
                    "/strmvol-large/model.bin",
                    "",
                    &[],
                    &body,
                    &hex::encode(&sha),
                )
                .await?;
            if status != 200 {
                bail!(
                    "PUT of the large object answered {status}: {}",
                    c.body_excerpt()
                );
            }
            drop(body);
            tokio::task::block_in_place(|| {
                objvol_create(&control, "strmvol-large", "strmvol-large")
            })?;
            let start = basalt_objvol::erofs::DATA_START_BLOCK;
            let (mut via_nbd, mut direct) = (Vec::new(), Vec::new());
            for _ in 0..LARGE_ROUNDS {
                direct.push(get_large(&endpoint, "strmvol-large", "model.bin", size).await?);
                via_nbd
                    .push(read_large(&nbd_addr, "objvol:strmvol-large", start, size, &sha).await?);
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
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the peak RSS is read from /proc/self/status, and is at least the current RSS.
    #[test]
    fn reads_rss_and_its_peak() {
        let current = reset_peak_rss().unwrap();
        let peak = peak_rss().unwrap();
        assert!(current > 0 && peak >= current / 2, "{current} {peak}");
    }

    /// Goal: small files span 4–128 KiB and are a pure function of their number (reads
    /// are checked against them); index keys sort by class then number.
    #[test]
    fn fixtures_are_what_the_rows_say() {
        let sizes: Vec<usize> = (0..2000).map(|i| small_body(i).len()).collect();
        assert!(sizes
            .iter()
            .all(|s| (SMALL_MIN_BYTES..=SMALL_MAX_BYTES).contains(s)));
        assert!(sizes.iter().any(|s| *s < 16 << 10) && sizes.iter().any(|s| *s > 112 << 10));
        assert_eq!(small_body(7), small_body(7));
        assert_ne!(small_body(7)[..64], small_body(8)[..64]);
        let keys: Vec<String> = (0..10_000).map(|i| index_key(i, 10_000)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(keys[0], "train/class-0000/img-00000000.jpg");
    }
}
