//! Reading and changing the index record of a key, in buckets with and without versioning:
//! the current version (a delete marker hides the key), a given version, writes that make a
//! new current version (conditional or not) and deletes; and the bucket operations that
//! turn versioning on. Every change of a versioned key is one read–modify–write of its
//! record, conditional on the bytes read (see docs/design.md, "Versioning").

use super::access::{check_version_access, Access, Need};
use super::unsupported::check_version;
use super::Gateway;
use crate::buckets::{self, BucketRecord, Versioning};
use crate::index::{self, ObjectEntry, Table};
use crate::versions::{self, Changed};
use basalt_proto::kv::KvCond;
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result};

/// Rounds of read–modify–write one change may take against racing writers of the key.
const MAX_CHANGE_ATTEMPTS: usize = 16;

/// What a write asks of the version it replaces: `If-Match` and `If-None-Match`.
pub(super) type WriteConditions<'a> = (Option<&'a ETagCondition>, Option<&'a ETagCondition>);

/// What a conditional delete expects of the object: its ETag (`*`: any), size and
/// last-modified time (to the second, as HTTP dates carry it).
#[derive(Default)]
pub(super) struct DeleteConditions<'a> {
    pub etag: Option<String>,
    pub size: Option<i64>,
    pub modified: Option<&'a Timestamp>,
    /// The owner's `x-amz-bypass-governance-retention` (removes GOVERNANCE-locked versions).
    pub bypass_governance: bool,
}

impl DeleteConditions<'_> {
    fn any(&self) -> bool {
        self.etag.is_some() || self.size.is_some() || self.modified.is_some()
    }

    fn hold_for(&self, entry: &ObjectEntry) -> bool {
        self.etag
            .as_deref()
            .is_none_or(|e| e == "*" || e == entry.etag)
            && self.size.is_none_or(|s| s == entry.size as i64)
            && self.modified.is_none_or(|t| {
                super::dto::ms_of(t).div_euclid(1000) == entry.modified_ms.div_euclid(1000)
            })
    }
}

/// What a delete did: the version it removed or the delete marker it made.
pub(super) struct Removed {
    pub version_id: Option<String>,
    pub delete_marker: bool,
}

/// The current version of a record, unless it is a delete marker.
fn visible(record: &Option<ObjectEntry>) -> Option<&ObjectEntry> {
    record.as_ref().filter(|r| !r.delete_marker)
}

/// Check `If-Match`/`If-None-Match` of a write against the record it replaces.
fn check_write(record: &Option<ObjectEntry>, conds: WriteConditions<'_>) -> S3Result<()> {
    match conds {
        (None, None) => Ok(()),
        (Some(_), Some(_)) => Err(s3_error!(
            NotImplemented,
            "If-Match and If-None-Match together on a write are not supported"
        )),
        (None, Some(c)) if c.is_any() => match visible(record) {
            None => Ok(()),
            Some(_) => Err(s3_error!(PreconditionFailed)),
        },
        (None, Some(_)) => Err(s3_error!(
            NotImplemented,
            "If-None-Match on a write supports only \"*\""
        )),
        (Some(c), None) => {
            let current = visible(record).ok_or_else(|| s3_error!(NoSuchKey))?;
            let matches = c.is_any()
                || c.as_etag()
                    .is_some_and(|e| e.value() == current.etag.as_str());
            if matches {
                Ok(())
            } else {
                Err(s3_error!(PreconditionFailed))
            }
        }
    }
}

/// The answer for a delete marker: NoSuchKey as the current version, MethodNotAllowed when
/// asked for by id; both say it is a delete marker, and which.
fn deleted(marker: &ObjectEntry, by_id: bool) -> S3Error {
    let mut e = if by_id {
        s3_error!(
            MethodNotAllowed,
            "The specified method is not allowed against this resource (a delete marker)"
        )
    } else {
        s3_error!(NoSuchKey)
    };
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "x-amz-delete-marker",
        http::HeaderValue::from_static("true"),
    );
    if let Ok(v) = http::HeaderValue::from_str(&versions::shown(&marker.version_id)) {
        headers.insert("x-amz-version-id", v);
    }
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    e.set_headers(headers);
    e
}

impl Gateway {
    /// The version id replies name for `id` (`null` for None), once the bucket was ever
    /// versioned; None before.
    pub(super) fn shown_version(bucket: &BucketRecord, id: &Option<String>) -> Option<String> {
        bucket.versioning.map(|_| versions::shown(id))
    }

    /// The record of `key`: every version of it.
    async fn record(&self, bucket: &BucketRecord, key: &str) -> S3Result<Option<ObjectEntry>> {
        Ok(index::get(&self.cluster, bucket, Table::Index, key.as_bytes()).await?)
    }

    /// The data every version of `key` references (none when it has no record).
    pub(super) async fn entry_segments(
        &self,
        bucket: &BucketRecord,
        key: &str,
    ) -> S3Result<Vec<crate::index::Segment>> {
        Ok(self
            .record(bucket, key)
            .await?
            .map(|r| {
                versions::all(r)
                    .into_iter()
                    .flat_map(|v| v.segments)
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Version `version` of `key` (a request's `versionId`), or its current version:
    /// NoSuchKey when there is none or it is a delete marker.
    pub(super) async fn entry_version(
        &self,
        bucket: &BucketRecord,
        key: &str,
        version: Option<&str>,
    ) -> S3Result<ObjectEntry> {
        if bucket.versioning.is_none() {
            check_version(version)?;
        }
        let mut record = self
            .record(bucket, key)
            .await?
            .ok_or_else(|| match version {
                Some(_) => s3_error!(NoSuchVersion),
                None => s3_error!(NoSuchKey),
            })?;
        let Some(id) = version else {
            if record.delete_marker {
                return Err(deleted(&record, false));
            }
            check_version_access(bucket, &record.owner, &record.acl)?;
            record.older.clear();
            return Ok(record);
        };
        let found = versions::all(record)
            .into_iter()
            .find(|v| v.version_id == versions::named(id))
            .ok_or_else(|| s3_error!(NoSuchVersion))?;
        if found.delete_marker {
            return Err(deleted(&found, true));
        }
        check_version_access(bucket, &found.owner, &found.acl)?;
        Ok(found)
    }

    /// Change the record of `key` atomically: read it, let `change` compute the new one
    /// (None: nothing to do), write that if the record is still the one read; after a
    /// racing write, start again. A write that was applied although its reply said
    /// Conflict (a retry of a lost reply) is recognised by `applied` on the record re-read.
    pub(super) async fn change_record(
        &self,
        bucket: &BucketRecord,
        key: &str,
        mut change: impl FnMut(Option<ObjectEntry>) -> S3Result<Option<Changed>>,
        applied: impl Fn(&Option<ObjectEntry>) -> bool,
    ) -> S3Result<Option<Changed>> {
        let mut pending: Option<Changed> = None;
        for _ in 0..MAX_CHANGE_ATTEMPTS {
            let raw = index::get_raw(&self.cluster, bucket, Table::Index, key.as_bytes()).await?;
            let record: Option<ObjectEntry> = raw
                .as_ref()
                .map(|r| index::decode_raw(key.as_bytes(), r))
                .transpose()?;
            if let Some(done) = pending.take() {
                if applied(&record) {
                    return Ok(Some(done));
                }
            }
            let Some(changed) = change(record)? else {
                return Ok(None);
            };
            if let Some(r) = &changed.record {
                let bytes = serde_json::to_vec(r).map(|v| v.len()).unwrap_or(usize::MAX);
                let limit = self
                    .cluster
                    .map()
                    .pools
                    .get(&bucket.pool)
                    .map_or(versions::MAX_RECORD_BYTES, |p| {
                        versions::max_record_bytes(p.object_size)
                    });
                if bytes > limit {
                    return Err(s3_error!(
                        SlowDown,
                        "too many versions of this key ({} bytes of index record): remove old \
                         versions or expire them with a lifecycle rule",
                        bytes
                    ));
                }
            }
            let cond = match raw {
                Some(bytes) => KvCond::Equals(bytes),
                None => KvCond::Absent,
            };
            let written = index::put_if(
                &self.cluster,
                bucket,
                Table::Index,
                key.as_bytes(),
                changed.record.as_ref(),
                cond,
            )
            .await?;
            if written.is_some() {
                return Ok(Some(changed));
            }
            pending = Some(changed);
        }
        Err(s3_error!(
            SlowDown,
            "the key is being changed by many writers at once: try again"
        ))
    }

    /// Make `entry` the current version of `key` (its version id is chosen here, by the
    /// bucket's versioning) if the write's conditions hold at the moment the index takes it
    /// (If-None-Match: `*` — no current object; If-Match: ETAG or `*` — the object it
    /// matched, unchanged since). Then reclaim what no version references any more. On a
    /// failed condition, with `reclaim_new`, `entry`'s own data is reclaimed (a PUT's; a
    /// multipart upload keeps its parts for another try). Returns the entry as committed.
    pub(super) async fn commit(
        &self,
        bucket: &BucketRecord,
        key: &str,
        mut entry: ObjectEntry,
        conds: WriteConditions<'_>,
        reclaim_new: bool,
    ) -> S3Result<ObjectEntry> {
        entry.version_id = match bucket.versioning {
            Some(Versioning::Enabled) => Some(versions::new_version_id()),
            _ => None,
        };
        if bucket.versioning.is_none() && matches!(conds, (None, None)) {
            // The common case, in one round trip: the entry replaces whatever was there.
            let previous: Option<ObjectEntry> = index::put(
                &self.cluster,
                bucket,
                Table::Index,
                key.as_bytes(),
                Some(&entry),
            )
            .await?;
            let changed = versions::put(previous, entry.clone(), None);
            self.reclaim(bucket, changed.unreferenced);
            return Ok(entry);
        }
        let versioning = bucket.versioning;
        let result = self
            .change_record(
                bucket,
                key,
                |record| {
                    check_write(&record, conds)?;
                    Ok(Some(versions::put(record, entry.clone(), versioning)))
                },
                |record| {
                    record.as_ref().is_some_and(|r| {
                        !r.delete_marker
                            && r.version_id == entry.version_id
                            && r.segments == entry.segments
                            && r.modified_ms == entry.modified_ms
                    })
                },
            )
            .await;
        match result {
            Ok(changed) => {
                if let Some(c) = changed {
                    self.reclaim(bucket, c.unreferenced);
                }
                Ok(entry)
            }
            Err(e) => {
                let refused = matches!(
                    e.code(),
                    s3s::S3ErrorCode::PreconditionFailed | s3s::S3ErrorCode::NoSuchKey
                );
                if refused && reclaim_new {
                    self.reclaim(bucket, entry.segments.clone());
                }
                Err(e)
            }
        }
    }

    /// Delete `key`, or with `version` one version of it, if the object is the one
    /// `expected` describes (at the moment the index takes the change). Without a version,
    /// a versioned bucket gets a delete marker; a bucket never versioned loses the key
    /// (absent is fine, as in S3). The data no version references any more is reclaimed.
    pub(super) async fn remove_object(
        &self,
        bucket: &BucketRecord,
        key: &str,
        version: Option<&str>,
        expected: DeleteConditions<'_>,
    ) -> S3Result<Removed> {
        let versioning = match bucket.versioning {
            None => {
                check_version(version)?;
                None
            }
            Some(v) => Some(v),
        };
        let changed = match (version, versioning) {
            (Some(id), Some(_)) => {
                let target = versions::named(id);
                let mut was_marker = false;
                let changed = self
                    .change_record(
                        bucket,
                        key,
                        |record| {
                            let Some(record) = record else {
                                return Ok(None);
                            };
                            let Some(found) = versions::find(&record, &target) else {
                                return Ok(None);
                            };
                            if expected.any() && !expected.hold_for(found) {
                                return Err(s3_error!(PreconditionFailed));
                            }
                            if !crate::lock::removable(
                                found.retention,
                                found.legal_hold,
                                crate::index::now_ms(),
                                expected.bypass_governance,
                            ) {
                                return Err(s3_error!(AccessDenied, "{}", crate::lock::PROTECTED));
                            }
                            was_marker = found.delete_marker;
                            Ok(Some(versions::remove(record, &target).0))
                        },
                        |record| {
                            record
                                .as_ref()
                                .is_none_or(|r| versions::find(r, &target).is_none())
                        },
                    )
                    .await?;
                if let Some(c) = changed {
                    self.reclaim(bucket, c.unreferenced);
                }
                return Ok(Removed {
                    version_id: Some(id.to_string()),
                    delete_marker: was_marker,
                });
            }
            (None, Some(v)) => {
                let marker = versions::delete_marker(v);
                let removed = Removed {
                    version_id: marker.version_id.clone(),
                    delete_marker: true,
                };
                let changed = self
                    .change_record(
                        bucket,
                        key,
                        |record| {
                            if expected.any() {
                                let current =
                                    visible(&record).ok_or_else(|| s3_error!(NoSuchKey))?;
                                if !expected.hold_for(current) {
                                    return Err(s3_error!(PreconditionFailed));
                                }
                            }
                            Ok(Some(versions::put(record, marker.clone(), Some(v))))
                        },
                        |record| {
                            record.as_ref().is_some_and(|r| {
                                r.delete_marker
                                    && r.version_id == marker.version_id
                                    && r.modified_ms == marker.modified_ms
                            })
                        },
                    )
                    .await?;
                if let Some(c) = changed {
                    self.reclaim(bucket, c.unreferenced);
                }
                return Ok(removed);
            }
            (_, None) if !expected.any() => {
                let previous: Option<ObjectEntry> = index::put::<ObjectEntry>(
                    &self.cluster,
                    bucket,
                    Table::Index,
                    key.as_bytes(),
                    None,
                )
                .await?;
                previous.map(|p| Changed {
                    record: None,
                    unreferenced: versions::all(p)
                        .into_iter()
                        .flat_map(|v| v.segments)
                        .collect(),
                })
            }
            (_, None) => {
                self.change_record(
                    bucket,
                    key,
                    |record| {
                        let current = record.as_ref().ok_or_else(|| s3_error!(NoSuchKey))?;
                        if !expected.hold_for(current) {
                            return Err(s3_error!(PreconditionFailed));
                        }
                        Ok(Some(Changed {
                            record: None,
                            unreferenced: current.segments.clone(),
                        }))
                    },
                    |record| record.is_none(),
                )
                .await?
            }
        };
        if let Some(c) = changed {
            self.reclaim(bucket, c.unreferenced);
        }
        Ok(Removed {
            version_id: None,
            delete_marker: false,
        })
    }
}

impl Gateway {
    /// Edit one version of `key` (its current one, or `version`) with `edit`, atomically
    /// with any other change of the key; `done` recognises the edit on a re-read record (a
    /// retried write). Returns the version edited.
    pub(super) async fn change_version(
        &self,
        bucket: &BucketRecord,
        key: &str,
        version: Option<&str>,
        edit: impl Fn(&mut ObjectEntry) -> S3Result<()>,
        done: impl Fn(&ObjectEntry) -> bool,
    ) -> S3Result<Option<String>> {
        if bucket.versioning.is_none() {
            check_version(version)?;
        }
        let target = version.map(versions::named);
        let mut edited: Option<String> = None;
        self.change_record(
            bucket,
            key,
            |record| {
                let record = record.ok_or_else(|| match version {
                    Some(_) => s3_error!(NoSuchVersion),
                    None => s3_error!(NoSuchKey),
                })?;
                let mut all = versions::all(record);
                let i = match &target {
                    None => 0,
                    Some(id) => all
                        .iter()
                        .position(|v| &v.version_id == id)
                        .ok_or_else(|| s3_error!(NoSuchVersion))?,
                };
                if all[i].delete_marker {
                    return Err(deleted(&all[i], target.is_some()));
                }
                check_version_access(bucket, &all[i].owner, &all[i].acl)?;
                edit(&mut all[i])?;
                edited = all[i].version_id.clone();
                let mut top = all.remove(0);
                top.older = all;
                Ok(Some(Changed {
                    record: Some(top),
                    unreferenced: Vec::new(),
                }))
            },
            |record| {
                record.as_ref().is_some_and(|r| match &target {
                    None => done(r),
                    Some(id) => versions::find(r, id).is_some_and(&done),
                })
            },
        )
        .await?;
        Ok(edited)
    }

    /// Set the tags of `key`'s current version (or of `version`). Returns the version tagged.
    pub(super) async fn retag(
        &self,
        bucket: &BucketRecord,
        key: &str,
        version: Option<&str>,
        tags: std::collections::BTreeMap<String, String>,
    ) -> S3Result<Option<String>> {
        self.change_version(
            bucket,
            key,
            version,
            |v| {
                v.tags = tags.clone();
                Ok(())
            },
            |v| v.tags == tags,
        )
        .await
    }
}

/// PutBucketVersioning: Enabled or Suspended (never back to unversioned, as in S3).
pub(super) async fn put_bucket_versioning(
    gw: &Gateway,
    req: S3Request<PutBucketVersioningInput>,
) -> S3Result<S3Response<PutBucketVersioningOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let config = &req.input.versioning_configuration;
    if req.input.mfa.is_some()
        || config
            .mfa_delete
            .as_ref()
            .is_some_and(|m| m.as_str() == MFADelete::ENABLED)
    {
        return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
    }
    let status = match config.status.as_ref().map(|s| s.as_str()) {
        Some(BucketVersioningStatus::ENABLED) => Versioning::Enabled,
        Some(BucketVersioningStatus::SUSPENDED) if bucket.object_lock.is_some() => {
            return Err(s3_error!(
                InvalidBucketState,
                "An Object Lock configuration is present on this bucket, so the versioning \
                 state cannot be changed"
            ))
        }
        Some(BucketVersioningStatus::SUSPENDED) => Versioning::Suspended,
        _ => {
            return Err(s3_error!(
                MalformedXML,
                "the versioning status must be Enabled or Suspended"
            ))
        }
    };
    buckets::set_versioning(&gw.cluster, &bucket.name, status).await?;
    Ok(S3Response::new(PutBucketVersioningOutput {}))
}

/// GetBucketVersioning: the status, absent for a bucket never versioned.
pub(super) async fn get_bucket_versioning(
    gw: &Gateway,
    req: S3Request<GetBucketVersioningInput>,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let status = bucket.versioning.map(|v| {
        BucketVersioningStatus::from_static(match v {
            Versioning::Enabled => BucketVersioningStatus::ENABLED,
            Versioning::Suspended => BucketVersioningStatus::SUSPENDED,
        })
    });
    Ok(S3Response::new(GetBucketVersioningOutput {
        status,
        mfa_delete: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(etag: &str, marker: bool) -> Option<ObjectEntry> {
        Some(ObjectEntry {
            etag: etag.into(),
            delete_marker: marker,
            ..Default::default()
        })
    }

    /// Goal: write conditions are judged against the current version, and a delete marker
    /// counts as no object (If-None-Match: * succeeds, If-Match finds no key).
    #[test]
    fn write_conditions_see_through_delete_markers() {
        let any = ETagCondition::Any;
        let same = ETagCondition::ETag(ETag::Strong("abc".into()));
        let other = ETagCondition::ETag(ETag::Strong("xyz".into()));
        let code = |r: S3Result<()>| r.err().map(|e| e.code().as_str().to_string());
        assert_eq!(code(check_write(&None, (None, Some(&any)))), None);
        assert_eq!(code(check_write(&v("abc", true), (None, Some(&any)))), None);
        assert_eq!(
            code(check_write(&v("abc", false), (None, Some(&any)))).as_deref(),
            Some("PreconditionFailed")
        );
        assert_eq!(
            code(check_write(&v("abc", false), (Some(&same), None))),
            None
        );
        assert_eq!(
            code(check_write(&v("abc", false), (Some(&other), None))).as_deref(),
            Some("PreconditionFailed")
        );
        assert_eq!(
            code(check_write(&v("abc", true), (Some(&same), None))).as_deref(),
            Some("NoSuchKey")
        );
    }
}
