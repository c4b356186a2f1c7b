//! Who may do what: the opening of every operation. A request is signed with a known access
//! key (the protocol layer checked the signature) or anonymous. The bucket's owner may do
//! anything its policy does not deny; anyone else, what its policy allows, and in buckets
//! with ACLs on, what the bucket's or the object version's ACL grants (see docs/design.md,
//! "Access control" and "ACL grants"). Configuration of a bucket is its owner's alone.

use super::errors::internal;
use super::Gateway;
use crate::acl::{self, Grant, Permission, VersionCheck};
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
    /// Who asks (None: anonymous).
    pub caller: Option<String>,
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

    /// Whether the sender of the request `access` opened may do `need` on its bucket; for
    /// bucket-level needs (the deletes of a DeleteObjects), never one decided per version.
    pub(super) fn permits(&self, access: &Access, need: Need<'_>) -> S3Result<bool> {
        match allowed(
            &access.bucket,
            access.caller.as_deref(),
            need,
            access.source_ip,
        )? {
            Verdict::Allow => Ok(true),
            Verdict::Deny => Ok(false),
            Verdict::Version(_) => Err(internal(format!("{need:?} is decided per version"))),
        }
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
            caller,
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
        let mut bucket = buckets::get_bucket(&self.cluster, name)
            .await?
            .ok_or_else(|| s3_error!(NoSuchBucket))?;
        match allowed(&bucket, caller.as_deref(), need, source_ip(req))? {
            Verdict::Allow => Ok(bucket),
            Verdict::Deny => Err(s3_error!(AccessDenied)),
            Verdict::Version(check) => {
                bucket.version_check = Some(check);
                Ok(bucket)
            }
        }
    }
}

/// Where a request came from, as the front service recorded it.
fn source_ip<T>(req: &S3Request<T>) -> Option<std::net::IpAddr> {
    req.extensions.get::<Peer>().map(|p| p.0.ip())
}

/// What the bucket says of a request.
#[derive(Debug)]
pub(super) enum Verdict {
    Allow,
    Deny,
    /// It depends on the object version the request reads or edits (its owner and ACL).
    Version(VersionCheck),
}

/// Where an action's ACL permission is looked for: the bucket's ACL, or the ACL of the
/// object version it reads or edits; and which permission (None: ACLs never grant it).
enum AclScope {
    Bucket(Option<Permission>),
    Version(Option<Permission>),
}

/// The ACL scope of a policy action (S3's mapping of ACL permissions to actions).
fn acl_scope(action: &str) -> AclScope {
    use AclScope::{Bucket, Version};
    match action {
        "s3:ListBucket" | "s3:ListBucketVersions" | "s3:ListBucketMultipartUploads" => {
            Bucket(Some(Permission::Read))
        }
        "s3:PutObject"
        | "s3:DeleteObject"
        | "s3:DeleteObjectVersion"
        | "s3:AbortMultipartUpload"
        | "s3:ListMultipartUploadParts" => Bucket(Some(Permission::Write)),
        "s3:GetBucketAcl" => Bucket(Some(Permission::ReadAcp)),
        "s3:PutBucketAcl" => Bucket(Some(Permission::WriteAcp)),
        "s3:GetObject" | "s3:GetObjectVersion" => Version(Some(Permission::Read)),
        "s3:GetObjectAcl" => Version(Some(Permission::ReadAcp)),
        "s3:PutObjectAcl" => Version(Some(Permission::WriteAcp)),
        a if a.starts_with("s3:GetObject")
            || a.starts_with("s3:PutObject")
            || a.starts_with("s3:DeleteObject") =>
        {
            Version(None)
        }
        _ => Bucket(None),
    }
}

/// Whether `user` (None: anonymous) may do `need` on `bucket`: a Deny of its policy refuses
/// anyone; the owner may do the rest, others what the policy or (in buckets with ACLs on)
/// the bucket's ACL allows. With RestrictPublicBuckets, statements that grant everyone
/// count for the owner only. An action on an object version in a bucket with ACLs on is
/// decided on the version ([`Verdict::Version`]).
pub(super) fn allowed(
    bucket: &BucketRecord,
    user: Option<&str>,
    need: Need<'_>,
    source_ip: Option<std::net::IpAddr>,
) -> S3Result<Verdict> {
    let owner = user == Some(bucket.owner.as_str());
    let verdict = |ok: bool| if ok { Verdict::Allow } else { Verdict::Deny };
    let Need::Action {
        action,
        key,
        prefix,
    } = need
    else {
        return Ok(verdict(owner));
    };
    let decision = match &bucket.policy {
        None => Decision::Silent,
        Some(doc) => {
            let policy = policy::parse(doc, &bucket.name).map_err(|e| internal(e.message))?;
            let request = policy::PolicyRequest {
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
            if restrict && !owner {
                policy.evaluate_non_public(&request)
            } else {
                policy.evaluate(&request)
            }
        }
    };
    if decision == Decision::Deny {
        return Ok(Verdict::Deny);
    }
    let bucket_allows = owner || decision == Decision::Allow;
    if !bucket.ownership.acls_enabled() {
        return Ok(verdict(bucket_allows));
    }
    let public_counts = !bucket
        .public_access_block
        .is_some_and(|b| b.ignore_public_acls);
    Ok(match acl_scope(action) {
        AclScope::Bucket(permission) => verdict(
            bucket_allows
                || permission.is_some_and(|p| acl::grants(&bucket.acl, user, p, public_counts)),
        ),
        AclScope::Version(permission) => Verdict::Version(VersionCheck {
            caller: user.map(String::from),
            permission,
            bucket_allows,
            public_counts,
        }),
    })
}

/// Whether the version with owner `owner` and `acl` may be used by the request `bucket`
/// (as its authorisation left it) is for; AccessDenied if not.
pub(super) fn check_version_access(
    bucket: &BucketRecord,
    owner: &Option<String>,
    acl: &[Grant],
) -> S3Result<()> {
    match &bucket.version_check {
        Some(check) if !check.allows(owner.as_deref(), acl) => Err(s3_error!(AccessDenied)),
        _ => Ok(()),
    }
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
