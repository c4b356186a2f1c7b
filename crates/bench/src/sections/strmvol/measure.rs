//! What the strmvol section times: the in-process index build (and its peak RSS), the
//! listing in one stream, `basalt objvol create`, a kernel mount walked, and reads through
//! the objvol's NBD export or straight from the gateway.

use super::buckets::{connection, index_key, pattern, small_body};
use super::{CREATE_TIMEOUT, LARGE_READ_BYTES, SMALL_MAX_BYTES};
use crate::nbdclient::NbdConnection;
use crate::under_test::S3Endpoint;
use anyhow::{bail, Context};
use basalt_objvol::build::{build, Built};
use basalt_objvol::s3::{Credentials, S3Source};
use basalt_s3client::EMPTY_SHA256;
use sha2::{Digest, Sha256};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The high-water mark of this process's RSS, reset to the current RSS; (current, peak)
/// in bytes after the reset.
pub(super) fn reset_peak_rss() -> anyhow::Result<u64> {
    std::fs::write("/proc/self/clear_refs", "5").context("reset the peak RSS")?;
    Ok(status_kib("VmRSS", |s| s.vmrss)? * 1024)
}

pub(super) fn peak_rss() -> anyhow::Result<u64> {
    Ok(status_kib("VmHWM", |s| s.vmhwm)? * 1024)
}

/// A kB field of /proc/self/status.
pub(super) fn status_kib(
    name: &str,
    field: impl Fn(&procfs::process::Status) -> Option<u64>,
) -> anyhow::Result<u64> {
    let status = procfs::process::Process::myself()
        .and_then(|p| p.status())
        .context("read /proc/self/status")?;
    field(&status).with_context(|| format!("no {name} in /proc/self/status"))
}

/// What one in-process index build measured.
pub(super) struct BuildFigures {
    pub(super) seconds: f64,
    pub(super) listing_seconds: f64,
    pub(super) peak_rss_bytes: u64,
    pub(super) baseline_rss_bytes: u64,
    pub(super) files: u64,
}

pub(super) async fn build_index(
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
pub(super) async fn list_one_stream(
    endpoint: &S3Endpoint,
    bucket: &str,
) -> anyhow::Result<(f64, u64)> {
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
pub(super) fn objvol_create(control: &str, name: &str, bucket: &str) -> anyhow::Result<f64> {
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
    crate::sections::run_ok(&mut cmd, CREATE_TIMEOUT)
        .with_context(|| format!("basalt objvol create {name}"))?;
    Ok(started.elapsed().as_secs_f64())
}

/// Files of an index bucket read back (and compared) after the walk of its mount.
pub(super) const WALK_SAMPLE: u64 = 64;

/// What a walk of a mounted objvol saw.
pub(super) struct Walk {
    /// Mount, walk and sample reads.
    pub(super) seconds: f64,
    /// The walk alone.
    pub(super) walk_seconds: f64,
    pub(super) files: u64,
}

/// Mounts the objvol at `uri` with the kernel's EROFS, stats every file (there must be `n`
/// of `body_bytes` each), reads [`WALK_SAMPLE`] of them back against what was PUT, unmounts.
pub(super) fn mount_and_walk(
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
pub(super) struct Reads {
    pub(super) files: u64,
    pub(super) bytes: u64,
    pub(super) seconds: f64,
}

/// `readers` tasks reading random whole small files through the export for `seconds`,
/// each checked against what was PUT.
pub(super) async fn read_small(
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
pub(super) async fn read_large(
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
pub(super) async fn get_large(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the rise of the peak RSS over a reset (what the build rows report) keeps a
    /// transient allocation after it is freed; a reset brings the peak back down.
    #[test]
    fn reads_rss_and_its_peak() {
        const HELD_BYTES: usize = 64 << 20;
        let baseline = reset_peak_rss().unwrap();
        assert!(baseline > 0);
        // Touched (written) so every page is resident; larger than malloc's mmap threshold,
        // so freeing it returns it to the kernel.
        let block = std::hint::black_box(vec![1u8; HELD_BYTES]);
        let held = status_kib("VmRSS", |s| s.vmrss).unwrap() * 1024;
        drop(block);
        let peak = peak_rss().unwrap();
        // The kernel's RSS counters are per-thread batched (a few pages off), and other
        // test threads may free memory meanwhile: a quarter of the block is their margin.
        let rise = peak.saturating_sub(baseline);
        assert!(
            rise >= (HELD_BYTES as u64) * 3 / 4,
            "the peak rose by {rise} B over {baseline} with {HELD_BYTES} B held (RSS {held})"
        );
        let after_reset = reset_peak_rss().unwrap();
        let peak_after_reset = peak_rss().unwrap();
        assert!(
            peak_after_reset < baseline + (HELD_BYTES as u64) / 4,
            "the reset kept the old peak: {peak_after_reset} (held {held}, now {after_reset})"
        );
    }
}
