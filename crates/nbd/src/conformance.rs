//! The conformance suite every writable [`BlockDevice`] must pass before it is served: each
//! backend's tests call [`run_all`] on a fresh device (all zeroes, at least
//! [`MIN_DEVICE_BYTES`]). It checks what the server relies on and cannot check itself.

use std::sync::Arc;

use bytes::Bytes;

use crate::export::BlockDevice;

/// Smallest device the suite can run on.
pub const MIN_DEVICE_BYTES: u64 = 4 << 20;

/// Run every check; panics with a message on the first failure. Needs a tokio runtime (it
/// spawns concurrent writers).
pub async fn run_all(dev: Arc<dyn BlockDevice>) {
    assert!(
        dev.size() >= MIN_DEVICE_BYTES,
        "device too small for the suite"
    );
    assert!(!dev.read_only(), "the suite needs a writable device");
    fresh_reads_zero(&*dev).await;
    unaligned_roundtrip(&*dev).await;
    zeroing_reads_back_zero(&*dev).await;
    block_status_is_sound(&*dev).await;
    concurrent_writers(dev.clone()).await;
    durability_calls_succeed(&*dev).await;
}

fn pattern(seed: u8, len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

async fn read(dev: &dyn BlockDevice, offset: u64, len: u32) -> Bytes {
    let data = dev.read(offset, len).await.expect("read");
    assert_eq!(
        data.len(),
        len as usize,
        "read must return exactly len bytes"
    );
    data
}

async fn fresh_reads_zero(dev: &dyn BlockDevice) {
    let end = dev.size();
    for (offset, len) in [(0, 65536), (end - 4096, 4096), (end / 2 + 1, 1)] {
        let data = read(dev, offset, len).await;
        assert!(
            data.iter().all(|&b| b == 0),
            "fresh device reads zero at {offset}"
        );
    }
}

async fn unaligned_roundtrip(dev: &dyn BlockDevice) {
    let data = pattern(1, 300_001);
    dev.write(4095, data.clone(), false).await.expect("write");
    assert_eq!(read(dev, 4095, data.len() as u32).await, data);
    assert_eq!(
        read(dev, 4094, 1).await[0],
        0,
        "byte before the write untouched"
    );
    let after = 4095 + data.len() as u64;
    assert_eq!(
        read(dev, after, 1).await[0],
        0,
        "byte after the write untouched"
    );
    // Overwrite a middle part; the rest keeps the old data.
    dev.write(10_000, pattern(2, 7), true)
        .await
        .expect("fua write");
    let back = read(dev, 9_990, 30).await;
    assert_eq!(&back[10..17], &pattern(2, 7)[..]);
    assert_eq!(&back[..10], &data[9_990 - 4095..10_000 - 4095]);
    assert_eq!(
        read(dev, dev.size() - 1, 1).await.len(),
        1,
        "last byte readable"
    );
}

async fn zeroing_reads_back_zero(dev: &dyn BlockDevice) {
    let base = 1 << 20;
    dev.write(base, pattern(3, 512 << 10), false)
        .await
        .expect("write");
    dev.write_zeroes(base, 128 << 10, true, false)
        .await
        .expect("zero, may trim");
    dev.write_zeroes(base + (128 << 10), 100_000, false, true)
        .await
        .expect("zero, no hole");
    dev.write_zeroes(base + 300_000, 5, false, false)
        .await
        .expect("small zero");
    let back = read(dev, base, 512 << 10).await;
    let zeroed = (128 << 10) + 100_000;
    assert!(
        back[..zeroed].iter().all(|&b| b == 0),
        "zeroed range reads zero"
    );
    assert_eq!(
        &back[zeroed..300_000],
        &pattern(3, 512 << 10)[zeroed..300_000]
    );
    assert!(back[300_000..300_005].iter().all(|&b| b == 0));
    dev.trim(base + (256 << 10), 128 << 10, false)
        .await
        .expect("trim");
    dev.cache(base, 4096).await.expect("cache");
}

async fn block_status_is_sound(dev: &dyn BlockDevice) {
    // Whatever the device reports must be true: a `zero` extent reads as zeroes, and the
    // extents are non-empty and lie in order from the requested offset.
    let base = 2 << 20;
    dev.write(base, pattern(4, 64 << 10), false)
        .await
        .expect("write");
    dev.write_zeroes(base + (64 << 10), 64 << 10, true, false)
        .await
        .expect("zero");
    let len = 1 << 20;
    let extents = dev.block_status(base, len).await.expect("block status");
    assert!(
        !extents.is_empty(),
        "block status describes at least one extent"
    );
    let mut offset = base;
    let end = base + len as u64;
    for e in &extents {
        if offset >= end {
            break;
        }
        let n = e.length.min(end - offset) as u32;
        if e.zero && n > 0 {
            let data = read(dev, offset, n).await;
            assert!(
                data.iter().all(|&b| b == 0),
                "extent at {offset} claims zero"
            );
        }
        offset += e.length;
    }
    let first = extents[0];
    assert!(
        !first.zero && !first.hole,
        "written data is reported allocated, nonzero"
    );
}

async fn concurrent_writers(dev: Arc<dyn BlockDevice>) {
    let base = 3 << 20;
    let tasks: Vec<_> = (0..16u8)
        .map(|i| {
            let dev = dev.clone();
            tokio::spawn(async move {
                let offset = base + i as u64 * 4096;
                dev.write(offset, pattern(i, 4096), false)
                    .await
                    .expect("write");
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("writer task");
    }
    for i in 0..16u8 {
        let back = read(&*dev, base + i as u64 * 4096, 4096).await;
        assert_eq!(back, pattern(i, 4096), "region {i} after concurrent writes");
    }
}

async fn durability_calls_succeed(dev: &dyn BlockDevice) {
    dev.flush().await.expect("flush");
    dev.write(0, pattern(9, 512), true)
        .await
        .expect("fua write");
    dev.trim(0, 512, true).await.expect("fua trim");
    dev.write_zeroes(0, 512, true, true)
        .await
        .expect("fua zero");
    assert!(read(dev, 0, 512).await.iter().all(|&b| b == 0));
    dev.flush().await.expect("flush");
}
