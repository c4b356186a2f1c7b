//! Who may do what: the opening of every operation. A request is signed with a known access
//! key (the protocol layer checked the signature) or anonymous. The bucket's owner may do
//! anything its policy does not deny; anyone else, what its policy allows (see
//! docs/design.md, "Access control"). Configuration of a bucket is its owner's alone.

use super::errors::internal;
use super::Gateway;
use crate::buckets::{self, BucketRecord};
use crate::policy::{self, Decision};
use s3s::dto::CopySource;
use s3s::{s3_error, S3Request, S3Result};
use std::net::SocketAddr;

/// What an operation needs of the bucket it names.
#[derive(Clone, Copy, Debug)]
pub(super) enum Need<'a> {
    /// Only the bucket's owner: its configuration (versioning, policy, ACLs, removal).
    Owner,
    /// A policy action (one of `policy::ACTIONS`) on the bucket or on one key; a listing
    /// also names its prefix (for `s3:prefix` conditions).
    Action {
        action: &'static str,
        key: Option<&'a str>,
        prefix: Option<&'a str>,
    },
}

impl<'a> Need<'a> {
    /// `action` on key `key`.
    pub fn object(action: &'static str, key: &'a str) -> Self {
        Need::Action {
            action,
            key: Some(key),
            prefix: None,
        }
    }

    /// `action` on the bucket itself.
    pub fn bucket(action: &'static str) -> Self {
        Need::Action {
            action,
            key: None,
            prefix: None,
        }
    }

    /// A listing (`action`) under `prefix`.
    pub fn listing(action: &'static str, prefix: Option<&'a str>) -> Self {
        Need::Action {
            action,
            key: None,
            prefix: Some(prefix.unwrap_or("")),
        }
    }
}

/// An authorised request on one bucket: who sent it (None: anonymous) and the bucket.
pub(super) struct Access {
    pub caller: Option<String>,
    pub bucket: BucketRecord,
    /// Where the request came from (for `aws:SourceIp`).
    pub source_ip: Option<std::net::IpAddr>,
}

/// An authorised copy: the source bucket and key, and the target bucket.
pub(super) struct CopyAccess {
    pub source: BucketRecord,
    pub source_key: String,
    /// The source's version, when the copy names one.
    pub source_version: Option<String>,
    pub bucket: BucketRecord,
}

/// The address a request came from (the gateway's front service records it).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

impl Gateway {
    /// Authorise a request on bucket `name` for `need`. Every operation on a bucket or its
    /// objects opens with this (copies with [`Gateway::authorise_copy`]).
    pub(super) async fn authorise<T>(
        &self,
        req: &S3Request<T>,
        name: &str,
        need: Need<'_>,
    ) -> S3Result<Access> {
        let caller = self.caller(req).await?;
        let bucket = self.bucket_for(req, &caller, name, need).await?;
        check_expected_owner(req, "x-amz-expected-bucket-owner", &bucket)?;
        Ok(Access {
            caller,
            bucket,
            source_ip: source_ip(req),
        })
    }

    /// The bucket `name` for a request whose needs are checked one by one afterwards with
    /// [`Gateway::permits`] (a DeleteObjects of many keys).
    pub(super) async fn open<T>(&self, req: &S3Request<T>, name: &str) -> S3Result<Access> {
        let caller = self.caller(req).await?;
        let bucket = buckets::get_bucket(&self.cluster, name)
            .await?
            .ok_or_else(|| s3_error!(NoSuchBucket))?;
        check_expected_owner(req, "x-amz-expected-bucket-owner", &bucket)?;
        Ok(Access {
            caller,
            bucket,
            source_ip: source_ip(req),
        })
    }

    /// Whether the sender of the request `access` opened may do `need` on its bucket.
    pub(super) fn permits(&self, access: &Access, need: Need<'_>) -> S3Result<bool> {
        allowed(
            &access.bucket,
            access.caller.as_deref(),
            need,
            access.source_ip,
        )
    }

    /// Authorise a copy from `source` into bucket `target`: reading the source (object or
    /// version) and writing the target key. The source bucket is looked up first, so its
    /// error comes first.
    pub(super) async fn authorise_copy<T>(
        &self,
        req: &S3Request<T>,
        source: &CopySource,
        target: &str,
        target_key: &str,
    ) -> S3Result<CopyAccess> {
        let caller = self.caller(req).await?;
        let CopySource::Bucket {
            bucket: source,
            key: source_key,
            version_id,
        } = source
        else {
            return Err(s3_error!(NotImplemented, "copy from an access point"));
        };
        let read = if version_id.is_some() {
            "s3:GetObjectVersion"
        } else {
            "s3:GetObject"
        };
        let source = self
            .bucket_for(req, &caller, source, Need::object(read, source_key))
            .await?;
        check_expected_owner(req, "x-amz-source-expected-bucket-owner", &source)?;
        let bucket = self
            .bucket_for(
                req,
                &caller,
                target,
                Need::object("s3:PutObject", target_key),
            )
            .await?;
        check_expected_owner(req, "x-amz-expected-bucket-owner", &bucket)?;
        Ok(CopyAccess {
            source,
            source_key: source_key.to_string(),
            source_version: version_id.as_deref().map(String::from),
            bucket,
        })
    }

    /// Who sent a request: the user of its access key, None for an anonymous request. A key
    /// removed since the protocol layer checked the signature is refused.
    pub(super) async fn caller<T>(&self, req: &S3Request<T>) -> S3Result<Option<String>> {
        let Some(cred) = &req.credentials else {
            return Ok(None);
        };
        match self.keys.lookup(&cred.access_key).await {
            Ok(Some(k)) => Ok(Some(k.user)),
            Ok(None) => Err(s3_error!(InvalidAccessKeyId)),
            Err(e) => Err(internal(e)),
        }
    }

    /// A signed caller, for what anonymous requests may never do (create or list buckets).
    pub(super) async fn signed_caller<T>(&self, req: &S3Request<T>) -> S3Result<String> {
        self.caller(req)
            .await?
            .ok_or_else(|| s3_error!(AccessDenied, "anonymous requests cannot do this"))
    }

    /// The bucket `name`, if `caller` may do `need` on it.
    async fn bucket_for<T>(
        &self,
        req: &S3Request<T>,
        caller: &Option<String>,
        name: &str,
        need: Need<'_>,
    ) -> S3Result<BucketRecord> {
        let bucket = buckets::get_bucket(&self.cluster, name)
            .await?
            .ok_or_else(|| s3_error!(NoSuchBucket))?;
        if allowed(&bucket, caller.as_deref(), need, source_ip(req))? {
            Ok(bucket)
        } else {
            Err(s3_error!(AccessDenied))
        }
    }
}

/// Where a request came from, as the front service recorded it.
fn source_ip<T>(req: &S3Request<T>) -> Option<std::net::IpAddr> {
    req.extensions.get::<Peer>().map(|p| p.0.ip())
}

/// Whether `user` (None: anonymous) may do `need` on `bucket`: a Deny of its policy refuses
/// anyone, the owner may do the rest, others what the policy allows. With
/// RestrictPublicBuckets, statements that grant everyone count for the owner only.
fn allowed(
    bucket: &BucketRecord,
    user: Option<&str>,
    need: Need<'_>,
    source_ip: Option<std::net::IpAddr>,
) -> S3Result<bool> {
    let owner = user == Some(bucket.owner.as_str());
    let Need::Action {
        action,
        key,
        prefix,
    } = need
    else {
        return Ok(owner);
    };
    let Some(doc) = &bucket.policy else {
        return Ok(owner);
    };
    let policy = policy::parse(doc, &bucket.name).map_err(|e| internal(e.message))?;
    let request = policy::Request {
        user,
        action,
        bucket: &bucket.name,
        key,
        source_ip,
        prefix,
    };
    let restrict = bucket
        .public_access_block
        .is_some_and(|b| b.restrict_public_buckets);
    let decision = if restrict && !owner {
        policy.evaluate_non_public(&request)
    } else {
        policy.evaluate(&request)
    };
    Ok(match decision {
        Decision::Deny => false,
        Decision::Allow => true,
        Decision::Silent => owner,
    })
}

/// `x-amz-expected-bucket-owner` (or the copy source's): a request that names an owner
/// other than the bucket's is refused, so a client never writes into a bucket it did not
/// mean (owners' account ids are their user names here).
fn check_expected_owner<T>(
    req: &S3Request<T>,
    header: &str,
    bucket: &BucketRecord,
) -> S3Result<()> {
    match req.headers.get(header) {
        Some(v) if v.as_bytes() != bucket.owner.as_bytes() => Err(s3_error!(
            AccessDenied,
            "the bucket is not owned by the expected owner"
        )),
        _ => Ok(()),
    }
}
