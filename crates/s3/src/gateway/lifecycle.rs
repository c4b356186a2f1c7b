//! Lifecycle: Put/Get/DeleteBucketLifecycleConfiguration (rules checked whole, transitions
//! refused), and the worker that applies the rules: expiring current versions, removing
//! noncurrent versions and lone delete markers, aborting old multipart uploads.

use super::access::{Access, Need};
use super::dto::{ms_of, timestamp_ms};
use super::versioned::DeleteConditions;
use super::Gateway;
use crate::buckets::{self, BucketError, BucketRecord};
use crate::index::{self, now_ms, Listed};
use crate::lifecycle::{judge, still_removed, Rule, MAX_RULES};
use crate::versions;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// A rule of the protocol as stored, checked: S3's limits, and what is not implemented
/// (storage class transitions) refused.
fn rule_of(r: LifecycleRule, n: usize) -> S3Result<Rule> {
    if r.transitions.as_ref().is_some_and(|t| !t.is_empty())
        || r.noncurrent_version_transitions
            .as_ref()
            .is_some_and(|t| !t.is_empty())
    {
        return Err(s3_error!(
            NotImplemented,
            "lifecycle transitions between storage classes are not supported: every object \
             is STANDARD"
        ));
    }
    let id = r.id.unwrap_or_else(|| format!("rule-{n}"));
    if id.is_empty() || id.chars().count() > 255 {
        return Err(s3_error!(
            InvalidArgument,
            "a rule ID is 1 to 255 characters"
        ));
    }
    let enabled = match r.status.as_str() {
        ExpirationStatus::ENABLED => true,
        ExpirationStatus::DISABLED => false,
        other => return Err(s3_error!(MalformedXML, "rule status {other:?}")),
    };
    let mut rule = Rule {
        id,
        enabled,
        prefix: r.prefix.unwrap_or_default(),
        ..Default::default()
    };
    if let Some(f) = r.filter {
        let and = f.and.unwrap_or_default();
        rule.prefix = f.prefix.or(and.prefix).unwrap_or(rule.prefix);
        let mut tags: Vec<Tag> = and.tags.unwrap_or_default();
        tags.extend(f.tag);
        for t in tags {
            let (Some(k), Some(v)) = (t.key, t.value) else {
                return Err(s3_error!(MalformedXML, "a Tag needs a Key and a Value"));
            };
            rule.tags.insert(k, v);
        }
        rule.size_greater_than = f
            .object_size_greater_than
            .or(and.object_size_greater_than)
            .map(|s| s.max(0) as u64);
        rule.size_less_than = f
            .object_size_less_than
            .or(and.object_size_less_than)
            .map(|s| s.max(0) as u64);
    }
    let positive = |d: Option<i32>, what: &str| -> S3Result<Option<u32>> {
        match d {
            None => Ok(None),
            Some(d) if d > 0 => Ok(Some(d as u32)),
            Some(_) => Err(s3_error!(
                InvalidArgument,
                "{what} must be a positive number of days"
            )),
        }
    };
    if let Some(e) = r.expiration {
        let marker = e.expired_object_delete_marker == Some(true);
        if marker && (e.days.is_some() || e.date.is_some()) {
            return Err(s3_error!(
                MalformedXML,
                "ExpiredObjectDeleteMarker cannot be specified with Days or Date"
            ));
        }
        if e.days.is_some() && e.date.is_some() {
            return Err(s3_error!(
                MalformedXML,
                "Expiration takes Days or Date, not both"
            ));
        }
        rule.expiration_days = positive(e.days, "Expiration Days")?;
        rule.expiration_date_ms = e.date.as_ref().map(ms_of);
        rule.expired_object_delete_marker = marker;
    }
    if let Some(n) = r.noncurrent_version_expiration {
        rule.noncurrent_days = positive(n.noncurrent_days, "NoncurrentDays")?;
        if rule.noncurrent_days.is_none() {
            return Err(s3_error!(
                MalformedXML,
                "NoncurrentVersionExpiration needs NoncurrentDays"
            ));
        }
        rule.newer_noncurrent_versions = match n.newer_noncurrent_versions {
            None => None,
            Some(k) if (1..=100).contains(&k) => Some(k as u32),
            Some(_) => {
                return Err(s3_error!(
                    InvalidArgument,
                    "NewerNoncurrentVersions is 1 to 100"
                ))
            }
        };
    }
    if let Some(a) = r.abort_incomplete_multipart_upload {
        rule.abort_multipart_days = positive(a.days_after_initiation, "DaysAfterInitiation")?;
        if !rule.tags.is_empty() {
            return Err(s3_error!(
                InvalidRequest,
                "AbortIncompleteMultipartUpload cannot be specified with Tags"
            ));
        }
    }
    let acts = rule.expiration_days.is_some()
        || rule.expiration_date_ms.is_some()
        || rule.expired_object_delete_marker
        || rule.noncurrent_days.is_some()
        || rule.abort_multipart_days.is_some();
    if !acts {
        return Err(s3_error!(
            InvalidRequest,
            "rule {:?} has no action (Expiration, NoncurrentVersionExpiration or \
             AbortIncompleteMultipartUpload)",
            rule.id
        ));
    }
    Ok(rule)
}

/// A stored rule as the protocol's.
fn protocol_rule(r: &Rule) -> LifecycleRule {
    let tags: Vec<Tag> = r
        .tags
        .iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect();
    let filter = if tags.len() <= 1 && r.size_greater_than.is_none() && r.size_less_than.is_none() {
        LifecycleRuleFilter {
            prefix: (tags.is_empty()).then(|| r.prefix.clone()),
            tag: tags.into_iter().next(),
            ..Default::default()
        }
    } else {
        LifecycleRuleFilter {
            and: Some(LifecycleRuleAndOperator {
                prefix: Some(r.prefix.clone()),
                tags: Some(tags),
                object_size_greater_than: r.size_greater_than.map(|s| s as i64),
                object_size_less_than: r.size_less_than.map(|s| s as i64),
            }),
            ..Default::default()
        }
    };
    let expiration = (r.expiration_days.is_some()
        || r.expiration_date_ms.is_some()
        || r.expired_object_delete_marker)
        .then(|| LifecycleExpiration {
            days: r.expiration_days.map(|d| d as i32),
            date: r.expiration_date_ms.map(timestamp_ms),
            expired_object_delete_marker: r.expired_object_delete_marker.then_some(true),
        });
    LifecycleRule {
        id: Some(r.id.clone()),
        status: ExpirationStatus::from_static(if r.enabled {
            ExpirationStatus::ENABLED
        } else {
            ExpirationStatus::DISABLED
        }),
        filter: Some(filter),
        expiration,
        noncurrent_version_expiration: r.noncurrent_days.map(|d| NoncurrentVersionExpiration {
            noncurrent_days: Some(d as i32),
            newer_noncurrent_versions: r.newer_noncurrent_versions.map(|n| n as i32),
        }),
        abort_incomplete_multipart_upload: r.abort_multipart_days.map(|d| {
            AbortIncompleteMultipartUpload {
                days_after_initiation: Some(d as i32),
            }
        }),
        noncurrent_version_transitions: None,
        prefix: None,
        transitions: None,
    }
}

/// PutBucketLifecycleConfiguration: the rules, checked whole, replace the bucket's.
pub(super) async fn put_bucket_lifecycle_configuration(
    gw: &Gateway,
    req: S3Request<PutBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let rules = req
        .input
        .lifecycle_configuration
        .map(|c| c.rules)
        .unwrap_or_default();
    if rules.is_empty() || rules.len() > MAX_RULES {
        return Err(s3_error!(
            MalformedXML,
            "a lifecycle configuration has 1 to {MAX_RULES} rules"
        ));
    }
    let mut parsed = Vec::with_capacity(rules.len());
    let mut ids = std::collections::BTreeSet::new();
    for (n, r) in rules.into_iter().enumerate() {
        let rule = rule_of(r, n + 1)?;
        if !ids.insert(rule.id.clone()) {
            return Err(s3_error!(
                InvalidArgument,
                "rule ID {:?} is used twice",
                rule.id
            ));
        }
        parsed.push(rule);
    }
    buckets::update_bucket(&gw.cluster, &bucket.name, |r| {
        r.lifecycle = parsed.clone();
        Ok::<(), BucketError>(())
    })
    .await?;
    Ok(S3Response::new(
        PutBucketLifecycleConfigurationOutput::default(),
    ))
}

/// GetBucketLifecycleConfiguration: the rules, or NoSuchLifecycleConfiguration.
pub(super) async fn get_bucket_lifecycle_configuration(
    gw: &Gateway,
    req: S3Request<GetBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    if bucket.lifecycle.is_empty() {
        return Err(s3_error!(NoSuchLifecycleConfiguration));
    }
    Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
        rules: Some(bucket.lifecycle.iter().map(protocol_rule).collect()),
        ..Default::default()
    }))
}

/// DeleteBucketLifecycle: no rules (absent is fine).
pub(super) async fn delete_bucket_lifecycle(
    gw: &Gateway,
    req: S3Request<DeleteBucketLifecycleInput>,
) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    buckets::update_bucket(&gw.cluster, &bucket.name, |r| {
        r.lifecycle.clear();
        Ok::<(), BucketError>(())
    })
    .await?;
    Ok(S3Response::new(DeleteBucketLifecycleOutput {}))
}

/// What the latest attempt of a removal takes out of a key's record: the versions' ids, and
/// how many noncurrent versions and lone delete markers they are.
#[derive(Default)]
struct Removing {
    ids: Vec<Option<String>>,
    counts: (u64, u64),
}

/// What one pass of the lifecycle worker did to a bucket.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub expired: u64,
    pub noncurrent_removed: u64,
    pub markers_removed: u64,
    pub uploads_aborted: u64,
}

impl Gateway {
    /// Apply `bucket`'s lifecycle rules once, with days of `day_ms`. Every change is
    /// conditional on what was judged (an object rewritten meanwhile is not expired), so
    /// passes of several gateways may overlap.
    pub(crate) async fn lifecycle_pass(
        &self,
        bucket: &BucketRecord,
        day_ms: i64,
    ) -> S3Result<Applied> {
        let mut applied = Applied::default();
        let rules = &bucket.lifecycle;
        if rules.is_empty() {
            return Ok(applied);
        }
        let now = now_ms();
        let mut after = String::new();
        // Bound: each page moves past at least one key of a finite index.
        loop {
            let page =
                index::list_objects(&self.cluster, bucket, "", &after, None, 1000, true).await?;
            for item in &page.items {
                let Listed::Object(key, record) = item else {
                    continue;
                };
                let all = versions::all((**record).clone());
                let verdict = judge(rules, key, &all, now, day_ms);
                if verdict.expire_current {
                    let current = &all[0];
                    let modified = timestamp_ms(current.modified_ms);
                    let expected = DeleteConditions {
                        etag: Some(current.etag.clone()),
                        size: Some(current.size as i64),
                        modified: Some(&modified),
                        bypass_governance: false,
                    };
                    match self.remove_object(bucket, key, None, expected).await {
                        Ok(_) => applied.expired += 1,
                        Err(e) => self.lifecycle_skip(bucket, key, e),
                    }
                }
                let mut judged: Vec<Option<String>> = verdict
                    .remove_noncurrent
                    .iter()
                    .map(|&i| all[i].version_id.clone())
                    .collect();
                if verdict.remove_lone_marker {
                    judged.push(all[0].version_id.clone());
                }
                if !judged.is_empty() {
                    match self
                        .remove_judged(bucket, key, &judged, (now, day_ms))
                        .await
                    {
                        Ok((noncurrent, markers)) => {
                            applied.noncurrent_removed += noncurrent;
                            applied.markers_removed += markers;
                        }
                        Err(e) => self.lifecycle_skip(bucket, key, e),
                    }
                }
            }
            match (page.truncated, page.items.last()) {
                (true, Some(last)) => after = last.name().to_string(),
                _ => break,
            }
        }
        if rules.iter().any(|r| r.abort_multipart_days.is_some()) {
            for (id, upload) in index::list_uploads(&self.cluster, bucket).await? {
                if rules
                    .iter()
                    .any(|r| r.aborts(&upload.key, upload.initiated_ms, now, day_ms))
                {
                    match self.abort_upload(bucket, &id).await {
                        Ok(()) => applied.uploads_aborted += 1,
                        Err(e) => self.lifecycle_skip(bucket, &upload.key, e),
                    }
                }
            }
        }
        Ok(applied)
    }

    /// Remove the versions of `key` judged removable (`judged`: their ids; noncurrent
    /// versions, a lone delete marker) that the bucket's rules still remove, at `now` with
    /// days of `day_ms`, on the record the index holds when it takes the change: one
    /// read–modify–write conditional on the bytes read, as every change of a key. A version
    /// that a racing DELETE made current again (or one of the newest kept), or a marker a
    /// PUT went over, stays; locked versions wait. Returns the noncurrent versions and lone
    /// markers removed.
    async fn remove_judged(
        &self,
        bucket: &BucketRecord,
        key: &str,
        judged: &[Option<String>],
        (now, day_ms): (i64, i64),
    ) -> S3Result<(u64, u64)> {
        // What the latest attempt removes (its ids, and the noncurrent and marker counts).
        let removing: Mutex<Removing> = Mutex::default();
        let changed = self
            .change_record(
                bucket,
                key,
                |record| {
                    let all = record.clone().map(versions::all).unwrap_or_default();
                    let locked_now = now_ms();
                    let gone: Vec<usize> =
                        still_removed(&bucket.lifecycle, key, &all, judged, now, day_ms)
                            .into_iter()
                            .filter(|&i| {
                                crate::lock::removable(
                                    all[i].retention,
                                    all[i].legal_hold,
                                    locked_now,
                                    false,
                                )
                            })
                            .collect();
                    if gone.is_empty() {
                        return Ok(None);
                    }
                    let ids: Vec<Option<String>> =
                        gone.iter().map(|&i| all[i].version_id.clone()).collect();
                    let (mut rest, mut unreferenced) = (record, Vec::new());
                    for id in &ids {
                        let Some(r) = rest else { break };
                        let (changed, _) = versions::remove(r, id);
                        unreferenced.extend(changed.unreferenced);
                        rest = changed.record;
                    }
                    let markers = u64::from(gone.first() == Some(&0));
                    *removing.lock().expect("removal") = Removing {
                        ids,
                        counts: (gone.len() as u64 - markers, markers),
                    };
                    Ok(Some(crate::versions::Changed {
                        record: rest,
                        unreferenced,
                    }))
                },
                // A retried write was applied when none of the versions it removes is left.
                |record| {
                    let all = record.clone().map(versions::all).unwrap_or_default();
                    let ids = &removing.lock().expect("removal").ids;
                    !ids.is_empty() && ids.iter().all(|id| all.iter().all(|v| &v.version_id != id))
                },
            )
            .await?;
        match changed {
            Some(c) => {
                self.reclaim(bucket, c.unreferenced);
                let counts = removing.lock().expect("removal").counts;
                Ok(counts)
            }
            None => Ok((0, 0)),
        }
    }

    /// A lifecycle change that did not apply: the object changed since it was judged (a
    /// precondition), or something to log.
    fn lifecycle_skip(&self, bucket: &BucketRecord, key: &str, e: s3s::S3Error) {
        if !matches!(
            e.code(),
            s3s::S3ErrorCode::PreconditionFailed
                | s3s::S3ErrorCode::NoSuchKey
                // A version under object lock waits for its retention to end.
                | s3s::S3ErrorCode::AccessDenied
                // An upload being completed is not aborted under it.
                | s3s::S3ErrorCode::OperationAborted
        ) {
            tracing::warn!(bucket = %bucket.name, key, "lifecycle: {e}");
        }
    }
}

/// Apply every bucket's lifecycle rules every `every`, with days of `day`, until `stop`.
pub async fn run(gw: Gateway, every: Duration, day: Duration, mut stop: watch::Receiver<bool>) {
    let day_ms = day.as_millis().max(1) as i64;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(every) => {}
        }
        // The start and end of each pass (debug: tests kill a gateway in the middle of one).
        tracing::debug!("lifecycle pass started");
        let all = match buckets::list_buckets(&gw.cluster).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("lifecycle: listing buckets: {e}");
                continue;
            }
        };
        for bucket in all.iter().filter(|b| !b.lifecycle.is_empty()) {
            match gw.lifecycle_pass(bucket, day_ms).await {
                Ok(a) if a != Applied::default() => tracing::info!(
                    bucket = %bucket.name,
                    expired = a.expired,
                    noncurrent_removed = a.noncurrent_removed,
                    delete_markers_removed = a.markers_removed,
                    uploads_aborted = a.uploads_aborted,
                    "lifecycle applied"
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!(bucket = %bucket.name, "lifecycle: {e}"),
            }
        }
        tracing::debug!("lifecycle pass done");
    }
}
