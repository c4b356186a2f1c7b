//! The strmvol section's buckets: what is PUT (keys and bodies, pure functions of their
//! number so reads can be checked) and the S3 calls that fill them, by the lean Rust
//! client, before any clock.

use super::{FILL_CLIENTS, REGION, SMALL_MAX_BYTES, SMALL_MIN_BYTES};
use crate::under_test::S3Endpoint;
use anyhow::{bail, Context};
use basalt_s3client::{Connection, Signer, EMPTY_SHA256};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// The key of index object `i`: a training set's shape, 1,000 classes.
pub(super) fn index_key(i: u64, n: u64) -> String {
    let per_class = n.div_ceil(1000).max(1);
    format!("train/class-{:04}/img-{i:08}.jpg", i / per_class)
}

/// Size and bytes of small file `i` (a pure function of `i`, so reads can be checked).
pub(super) fn small_body(i: usize) -> Vec<u8> {
    let span = SMALL_MAX_BYTES - SMALL_MIN_BYTES;
    let size = SMALL_MIN_BYTES + (i.wrapping_mul(7919) % (span + 1));
    pattern(i as u64, size)
}

/// `len` bytes determined by `seed` (xorshift).
pub(super) fn pattern(seed: u64, len: usize) -> Vec<u8> {
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

/// One S3 connection of `endpoint`.
pub(super) fn connection(endpoint: &S3Endpoint) -> anyhow::Result<Connection> {
    let addr = endpoint
        .url
        .strip_prefix("http://")
        .context("the S3 endpoint is not http://")?;
    Ok(Connection::new(
        addr,
        &Signer::new(&endpoint.access_key, &endpoint.secret_key, REGION),
    ))
}

pub(super) async fn create_bucket(endpoint: &S3Endpoint, bucket: &str) -> anyhow::Result<()> {
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
pub(super) async fn fill(
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

/// PUT the large object (`strmvol-large/model.bin`, `size` bytes) into a new bucket;
/// returns its SHA-256.
pub(super) async fn put_large(endpoint: &S3Endpoint, size: usize) -> anyhow::Result<Vec<u8>> {
    let body = pattern(u64::MAX, size);
    let sha = Sha256::digest(&body).to_vec();
    create_bucket(endpoint, "strmvol-large").await?;
    let mut c = connection(endpoint)?;
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
    Ok(sha)
}

#[cfg(test)]
mod tests {
    use super::*;

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
