//! The index-writing cost of an objvol build without the listing: N synthetic keys shaped
//! like a training set (`train/class-CCCC/img-NNNNNNN.jpg`, 1,000 classes, 100–200 KB
//! objects) fed to the EROFS writer and the extent map, as a build feeds them, with the
//! files in a temporary directory. Prints the time, the rate, the peak RSS of the process
//! and the index bytes per object (compare strmvol: 1M objects in 11.07 s and 871 MB).
//!
//! `cargo run --release -p basalt-objvol --example build_index -- 1000000`

use basalt_objvol::erofs::{Added, Writer};
use basalt_objvol::extents::Builder;
use std::io::{BufWriter, Seek, SeekFrom};
use std::time::Instant;

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(100_000);
    let dir = tempfile::tempdir()?;
    let rss_before = peak_rss_mib();
    let started = Instant::now();
    let mut writer = Writer::new(
        BufWriter::with_capacity(1 << 20, tempfile::tempfile_in(dir.path())?),
        1_700_000_000,
    )?;
    let mut map = Builder::new(
        BufWriter::with_capacity(1 << 20, tempfile::tempfile_in(dir.path())?),
        BufWriter::with_capacity(1 << 20, tempfile::tempfile_in(dir.path())?),
    );
    // Keys in listing order: by class, then image number.
    let per_class = n.div_ceil(1000);
    let mut added = 0u64;
    'all: for class in 0..1000u64 {
        for i in 0..per_class {
            if added == n {
                break 'all;
            }
            let key = format!(
                "train/class-{class:04}/img-{:07}.jpg",
                class * per_class + i
            );
            let size = 100_000 + (added * 7919) % 100_000;
            if let Added::File { start_block } = writer.add(key.as_bytes(), size, 1_600_000_000)? {
                map.push(
                    start_block,
                    size,
                    key.as_bytes(),
                    "\"0123456789abcdef0123456789abcdef\"",
                )?;
            }
            added += 1;
        }
    }
    let (meta, summary) = writer.finish()?;
    let (mut records, mut heap, header) = map.finish()?;
    let extents =
        header.len() as u64 + records.seek(SeekFrom::End(0))? + heap.seek(SeekFrom::End(0))?;
    drop((meta, records, heap));
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} objects in {secs:.2} s ({:.0} objects/s); peak RSS {:.0} MiB (before: {:.0} MiB); \
         EROFS metadata {} bytes ({:.1} per object), extent map {} bytes ({:.1} per object)",
        summary.files,
        summary.files as f64 / secs,
        peak_rss_mib(),
        rss_before,
        summary.meta_bytes,
        summary.meta_bytes as f64 / summary.files as f64,
        extents,
        extents as f64 / summary.files as f64
    );
    Ok(())
}
