//! Counters in the metadata store (ids of volumes, OSDs, pools), advanced with
//! compare-and-swap so concurrent allocators never hand out the same value.

use crate::store::{MetaError, MetaStore};

/// Bound on compare-and-swap attempts under contention.
pub const COUNTER_CAS_RETRIES: usize = 64;

/// Take the next value of the decimal counter at `key` (`first` when the key is absent).
/// Returns None when every attempt lost a race (too much contention).
pub async fn next_counter(
    meta: &dyn MetaStore,
    key: &str,
    first: u64,
) -> Result<Option<u64>, MetaError> {
    for _ in 0..COUNTER_CAS_RETRIES {
        let (current, rev) = match meta.get(key).await? {
            Some((v, rev)) => (
                String::from_utf8_lossy(&v).parse::<u64>().unwrap_or(first),
                rev,
            ),
            None => (first, 0),
        };
        let next = current.saturating_add(1).to_string().into_bytes();
        if meta.compare_and_swap(key, rev, next).await?.is_some() {
            return Ok(Some(current));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EmbeddedMeta;
    use std::sync::Arc;

    /// Goal: concurrent allocators get distinct, consecutive values.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_allocations_are_distinct() {
        let meta: Arc<dyn MetaStore> = Arc::new(EmbeddedMeta::in_memory());
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let meta = meta.clone();
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::new();
                for _ in 0..4 {
                    got.push(next_counter(meta.as_ref(), "/c", 1).await.unwrap().unwrap());
                }
                got
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all.sort();
        assert_eq!(all, (1..=32).collect::<Vec<u64>>());
    }
}
