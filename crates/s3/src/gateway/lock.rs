//! Object lock: Put/GetObjectLockConfiguration, Put/GetObjectRetention,
//! Put/GetObjectLegalHold, and the lock headers of uploads. What a lock forbids (removing a
//! version) is enforced where versions are removed (`versioned`).

use super::access::{Access, Need};
use super::dto::{ms_of, timestamp_ms};
use super::Gateway;
use crate::buckets::{self, BucketRecord, Versioning};
use crate::index::now_ms;
use crate::lock::{may_change, BucketLock, Mode, Retention, PROTECTED};
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result};

/// The lock of a new version from its request's headers (mode, retain-until date, legal
/// hold), or the bucket's default retention; refused on a bucket without object lock.
pub(super) fn lock_of(
    bucket: &BucketRecord,
    mode: Option<&ObjectLockMode>,
    until: Option<&Timestamp>,
    hold: Option<&ObjectLockLegalHoldStatus>,
) -> S3Result<(Option<Retention>, bool)> {
    let asked = mode.is_some() || until.is_some() || hold.is_some();
    let Some(lock) = bucket.object_lock else {
        if asked {
            return Err(s3_error!(
                InvalidRequest,
                "Bucket is missing Object Lock Configuration"
            ));
        }
        return Ok((None, false));
    };
    let now = now_ms();
    let retention = match (mode, until) {
        (None, None) => lock.default_retention(now),
        (Some(m), Some(t)) => {
            let mode = Mode::parse(m.as_str())
                .ok_or_else(|| s3_error!(InvalidArgument, "Unknown wormMode directive"))?;
            let until_ms = ms_of(t);
            if until_ms <= now {
                return Err(s3_error!(
                    InvalidArgument,
                    "The retain until date must be in the future!"
                ));
            }
            Some(Retention { mode, until_ms })
        }
        _ => {
            return Err(s3_error!(
                InvalidArgument,
                "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both \
                 be supplied"
            ))
        }
    };
    let legal_hold = match hold.map(|h| h.as_str()) {
        None | Some(ObjectLockLegalHoldStatus::OFF) => false,
        Some(ObjectLockLegalHoldStatus::ON) => true,
        Some(other) => return Err(s3_error!(InvalidArgument, "legal hold status {other:?}")),
    };
    Ok((retention, legal_hold))
}

/// The lock fields of a GET or HEAD answer.
macro_rules! answer_lock {
    ($output:ident, $retention:expr, $hold:expr) => {
        if let Some(r) = $retention {
            $output.object_lock_mode =
                Some(s3s::dto::ObjectLockMode::from(r.mode.as_str().to_string()));
            $output.object_lock_retain_until_date =
                Some($crate::gateway::dto::timestamp_ms(r.until_ms));
        }
        if $hold {
            $output.object_lock_legal_hold_status =
                Some(s3s::dto::ObjectLockLegalHoldStatus::from_static(
                    s3s::dto::ObjectLockLegalHoldStatus::ON,
                ));
        }
    };
}
pub(super) use answer_lock;

/// A lock request's bucket, authorised for `action` on `key`, which must have object lock.
async fn lock_bucket<T>(
    gw: &Gateway,
    req: &S3Request<T>,
    (bucket, key): (&str, &str),
    action: &'static str,
) -> S3Result<Access> {
    let access = gw.authorise(req, bucket, Need::object(action, key)).await?;
    if access.bucket.object_lock.is_none() {
        return Err(not_configured());
    }
    Ok(access)
}

fn not_configured() -> S3Error {
    let mut e = S3Error::with_message(
        s3s::S3ErrorCode::Custom("ObjectLockConfigurationNotFoundError".into()),
        "Object Lock configuration does not exist for this bucket",
    );
    e.set_status_code(http::StatusCode::NOT_FOUND);
    e
}

/// PutObjectLockConfiguration: enable object lock on a versioned bucket, with an optional
/// default retention.
pub(super) async fn put_object_lock_configuration(
    gw: &Gateway,
    req: S3Request<PutObjectLockConfigurationInput>,
) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let config = req
        .input
        .object_lock_configuration
        .ok_or_else(|| s3_error!(MalformedXML, "an ObjectLockConfiguration is required"))?;
    if config.object_lock_enabled.as_ref().map(|e| e.as_str()) != Some(ObjectLockEnabled::ENABLED) {
        return Err(s3_error!(MalformedXML, "ObjectLockEnabled must be Enabled"));
    }
    let mut lock = BucketLock::default();
    if let Some(d) = config.rule.and_then(|r| r.default_retention) {
        let mode = d
            .mode
            .as_ref()
            .and_then(|m| Mode::parse(m.as_str()))
            .ok_or_else(|| s3_error!(MalformedXML, "a default retention needs a Mode"))?;
        let days = match (d.days, d.years) {
            (Some(days), None) if days > 0 => days as u32,
            (None, Some(years)) if years > 0 => years as u32 * 365,
            _ => {
                return Err(s3_error!(
                    MalformedXML,
                    "a default retention has a positive Days or Years, not both"
                ))
            }
        };
        lock.default_mode = Some(mode);
        lock.default_days = Some(days);
    }
    buckets::update_bucket(&gw.cluster, &bucket.name, |r| {
        if r.versioning != Some(Versioning::Enabled) {
            return Err(s3_error!(
                InvalidBucketState,
                "Versioning must be 'Enabled' on the bucket to apply a Object Lock configuration"
            ));
        }
        r.object_lock = Some(lock);
        Ok(())
    })
    .await?;
    Ok(S3Response::new(PutObjectLockConfigurationOutput::default()))
}

/// GetObjectLockConfiguration: enabled, and the default retention.
pub(super) async fn get_object_lock_configuration(
    gw: &Gateway,
    req: S3Request<GetObjectLockConfigurationInput>,
) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let lock = bucket.object_lock.ok_or_else(not_configured)?;
    let rule = lock.default_mode.map(|mode| ObjectLockRule {
        default_retention: Some(DefaultRetention {
            mode: Some(ObjectLockRetentionMode::from(mode.as_str().to_string())),
            days: lock.default_days.map(|d| d as i32),
            years: None,
        }),
    });
    Ok(S3Response::new(GetObjectLockConfigurationOutput {
        object_lock_configuration: Some(ObjectLockConfiguration {
            object_lock_enabled: Some(ObjectLockEnabled::from_static(ObjectLockEnabled::ENABLED)),
            rule,
        }),
    }))
}

/// PutObjectRetention: set, extend or (GOVERNANCE, with the owner's bypass) shorten or
/// remove a version's retention.
pub(super) async fn put_object_retention(
    gw: &Gateway,
    req: S3Request<PutObjectRetentionInput>,
) -> S3Result<S3Response<PutObjectRetentionOutput>> {
    let target = (req.input.bucket.as_str(), req.input.key.as_str());
    let Access { bucket, caller, .. } =
        lock_bucket(gw, &req, target, "s3:PutObjectRetention").await?;
    let input = req.input;
    let bypass = input.bypass_governance_retention == Some(true)
        && caller.as_deref() == Some(bucket.owner.as_str());
    let new = match input.retention {
        None => None,
        Some(r) => match (r.mode, r.retain_until_date) {
            (None, None) => None,
            (Some(m), Some(t)) => Some(Retention {
                mode: Mode::parse(m.as_str())
                    .ok_or_else(|| s3_error!(MalformedXML, "Unknown retention mode"))?,
                until_ms: ms_of(&t),
            }),
            _ => {
                return Err(s3_error!(
                    MalformedXML,
                    "a Retention has a Mode and a RetainUntilDate"
                ))
            }
        },
    };
    gw.change_version(
        &bucket,
        &input.key,
        input.version_id.as_deref(),
        |v| {
            if !may_change(v.retention, new, now_ms(), bypass) {
                return Err(s3_error!(AccessDenied, "{PROTECTED}"));
            }
            v.retention = new;
            Ok(())
        },
        |v| v.retention == new,
    )
    .await?;
    Ok(S3Response::new(PutObjectRetentionOutput::default()))
}

/// GetObjectRetention: a version's retention.
pub(super) async fn get_object_retention(
    gw: &Gateway,
    req: S3Request<GetObjectRetentionInput>,
) -> S3Result<S3Response<GetObjectRetentionOutput>> {
    let target = (req.input.bucket.as_str(), req.input.key.as_str());
    let Access { bucket, .. } = lock_bucket(gw, &req, target, "s3:GetObjectRetention").await?;
    let entry = gw
        .entry_version(&bucket, &req.input.key, req.input.version_id.as_deref())
        .await?;
    let retention = entry.retention.ok_or_else(|| {
        let mut e = S3Error::with_message(
            s3s::S3ErrorCode::Custom("NoSuchObjectLockConfiguration".into()),
            "The specified object does not have a ObjectLock configuration",
        );
        e.set_status_code(http::StatusCode::NOT_FOUND);
        e
    })?;
    Ok(S3Response::new(GetObjectRetentionOutput {
        retention: Some(ObjectLockRetention {
            mode: Some(ObjectLockRetentionMode::from(
                retention.mode.as_str().to_string(),
            )),
            retain_until_date: Some(timestamp_ms(retention.until_ms)),
        }),
    }))
}

/// PutObjectLegalHold: ON or OFF on a version.
pub(super) async fn put_object_legal_hold(
    gw: &Gateway,
    req: S3Request<PutObjectLegalHoldInput>,
) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
    let target = (req.input.bucket.as_str(), req.input.key.as_str());
    let Access { bucket, .. } = lock_bucket(gw, &req, target, "s3:PutObjectLegalHold").await?;
    let input = req.input;
    let on = match input
        .legal_hold
        .and_then(|h| h.status)
        .as_ref()
        .map(|s| s.as_str())
    {
        Some(ObjectLockLegalHoldStatus::ON) => true,
        Some(ObjectLockLegalHoldStatus::OFF) => false,
        _ => return Err(s3_error!(MalformedXML, "a LegalHold Status is ON or OFF")),
    };
    gw.change_version(
        &bucket,
        &input.key,
        input.version_id.as_deref(),
        |v| {
            v.legal_hold = on;
            Ok(())
        },
        |v| v.legal_hold == on,
    )
    .await?;
    Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
}

/// GetObjectLegalHold: a version's legal hold.
pub(super) async fn get_object_legal_hold(
    gw: &Gateway,
    req: S3Request<GetObjectLegalHoldInput>,
) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
    let target = (req.input.bucket.as_str(), req.input.key.as_str());
    let Access { bucket, .. } = lock_bucket(gw, &req, target, "s3:GetObjectLegalHold").await?;
    let entry = gw
        .entry_version(&bucket, &req.input.key, req.input.version_id.as_deref())
        .await?;
    let status = if entry.legal_hold {
        ObjectLockLegalHoldStatus::ON
    } else {
        ObjectLockLegalHoldStatus::OFF
    };
    Ok(S3Response::new(GetObjectLegalHoldOutput {
        legal_hold: Some(ObjectLockLegalHold {
            status: Some(ObjectLockLegalHoldStatus::from_static(status)),
        }),
    }))
}
