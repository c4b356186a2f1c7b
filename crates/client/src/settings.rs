//! Cluster-wide settings (`basalt cluster set`, `basalt health mute`): one record in the
//! metadata store, read by `status` and changed by compare-and-swap.

use crate::error::ClientError;
use basalt_meta::schema::{ClusterSettings, SETTINGS_KEY};
use basalt_meta::MetaStore;

/// How often a change is retried when another one landed in between.
const CAS_TRIES: usize = 8;

/// The settings in force (the defaults when none were ever changed).
pub async fn load(meta: &dyn MetaStore) -> Result<ClusterSettings, ClientError> {
    Ok(load_with_revision(meta).await?.0)
}

async fn load_with_revision(
    meta: &dyn MetaStore,
) -> Result<(ClusterSettings, basalt_meta::Revision), ClientError> {
    match meta.get(SETTINGS_KEY).await? {
        None => Ok((ClusterSettings::default(), 0)),
        Some((bytes, rev)) => serde_json::from_slice(&bytes)
            .map(|s| (s, rev))
            .map_err(|e| ClientError::BadReply {
                reason: format!("the cluster settings record: {e}"),
            }),
    }
}

/// Apply `change` to the settings and store them, unless `change` refuses (its error is
/// returned and nothing is written). A concurrent change is re-read and `change` applied
/// to it again.
pub async fn update(
    meta: &dyn MetaStore,
    mut change: impl FnMut(&mut ClusterSettings) -> Result<(), ClientError>,
) -> Result<ClusterSettings, ClientError> {
    for _ in 0..CAS_TRIES {
        let (mut settings, rev) = load_with_revision(meta).await?;
        change(&mut settings)?;
        check(&settings)?;
        let value = serde_json::to_vec(&settings).map_err(|e| ClientError::Invalid {
            reason: format!("encode the cluster settings: {e}"),
        })?;
        if meta
            .compare_and_swap(SETTINGS_KEY, rev, value)
            .await?
            .is_some()
        {
            return Ok(settings);
        }
    }
    Err(ClientError::ChangedConcurrently {
        what: "the cluster settings".into(),
    })
}

/// Settings that make sense together: ratios in (0, 1], near-full below full.
pub fn check(s: &ClusterSettings) -> Result<(), ClientError> {
    for (name, ratio) in [
        ("nearfull-ratio", s.nearfull_ratio),
        ("full-ratio", s.full_ratio),
    ] {
        if !(ratio > 0.0 && ratio <= 1.0) {
            return Err(ClientError::Invalid {
                reason: format!("{name} must be above 0 and at most 1 (got {ratio})"),
            });
        }
    }
    if s.nearfull_ratio >= s.full_ratio {
        return Err(ClientError::Invalid {
            reason: format!(
                "nearfull-ratio ({}) must be below full-ratio ({})",
                s.nearfull_ratio, s.full_ratio
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_meta::EmbeddedMeta;

    /// Goal: absent settings read as Ceph's defaults; a change is stored; a change that
    /// would make the ratios nonsense is refused and leaves the record as it was.
    #[tokio::test]
    async fn defaults_changes_and_refusals() {
        let meta = EmbeddedMeta::in_memory();
        let s = load(&meta).await.unwrap();
        assert_eq!((s.nearfull_ratio, s.full_ratio), (0.85, 0.95));
        update(&meta, |s| {
            s.nearfull_ratio = 0.8;
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(load(&meta).await.unwrap().nearfull_ratio, 0.8);
        for bad in [0.0, 1.5, 0.96, f64::NAN] {
            let err = update(&meta, |s| {
                s.nearfull_ratio = bad;
                Ok(())
            })
            .await
            .unwrap_err();
            assert!(matches!(err, ClientError::Invalid { .. }), "{bad}: {err}");
        }
        assert_eq!(load(&meta).await.unwrap().nearfull_ratio, 0.8);
    }
}
