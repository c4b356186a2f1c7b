//! Who may do what: the opening of every operation. A request must be signed with a known
//! access key (the protocol layer checked the signature), and an operation on a bucket is
//! allowed only to the bucket's owner.

use super::errors::internal;
use super::Gateway;
use crate::buckets::{self, BucketRecord};
use s3s::dto::CopySource;
use s3s::{s3_error, S3Request, S3Result};

/// An authorised request on one bucket: who sent it, and the bucket, which they own.
pub(super) struct Access {
    pub user: String,
    pub bucket: BucketRecord,
}

/// An authorised copy: the source bucket and key, and the target bucket, all owned by the
/// sender.
pub(super) struct CopyAccess {
    pub source: BucketRecord,
    pub source_key: String,
    /// The source's version, when the copy names one.
    pub source_version: Option<String>,
    pub bucket: BucketRecord,
}

impl Gateway {
    /// Authorise a request on bucket `name`: its sender, who must own the bucket. Every
    /// operation on a bucket or its objects opens with this (copies with
    /// [`Gateway::authorise_copy`]).
    pub(super) async fn authorise<T>(&self, req: &S3Request<T>, name: &str) -> S3Result<Access> {
        let user = self.caller(req).await?;
        let bucket = self.owned_bucket(&user, name).await?;
        check_expected_owner(req, "x-amz-expected-bucket-owner", &bucket)?;
        Ok(Access { user, bucket })
    }

    /// Authorise a copy from `source` into bucket `target`: its sender, who must own both
    /// buckets. The source bucket is looked up before the target, so its error comes first.
    pub(super) async fn authorise_copy<T>(
        &self,
        req: &S3Request<T>,
        source: &CopySource,
        target: &str,
    ) -> S3Result<CopyAccess> {
        let user = self.caller(req).await?;
        let CopySource::Bucket {
            bucket: source,
            key: source_key,
            version_id,
        } = source
        else {
            return Err(s3_error!(NotImplemented, "copy from an access point"));
        };
        let source = self.owned_bucket(&user, source).await?;
        check_expected_owner(req, "x-amz-source-expected-bucket-owner", &source)?;
        let bucket = self.owned_bucket(&user, target).await?;
        check_expected_owner(req, "x-amz-expected-bucket-owner", &bucket)?;
        Ok(CopyAccess {
            source,
            source_key: source_key.to_string(),
            source_version: version_id.as_deref().map(String::from),
            bucket,
        })
    }

    /// Who sent a request: the user of its access key. Anonymous requests are refused; so is
    /// a key removed since the protocol layer checked the signature.
    pub(super) async fn caller<T>(&self, req: &S3Request<T>) -> S3Result<String> {
        let Some(cred) = &req.credentials else {
            return Err(s3_error!(
                AccessDenied,
                "anonymous requests are not allowed"
            ));
        };
        match self.keys.lookup(&cred.access_key).await {
            Ok(Some(k)) => Ok(k.user),
            Ok(None) => Err(s3_error!(InvalidAccessKeyId)),
            Err(e) => Err(internal(e)),
        }
    }

    /// The bucket `name`, if `user` owns it.
    async fn owned_bucket(&self, user: &str, name: &str) -> S3Result<BucketRecord> {
        match buckets::get_bucket(&self.cluster, name).await? {
            Some(b) if b.owner == user => Ok(b),
            Some(_) => Err(s3_error!(AccessDenied)),
            None => Err(s3_error!(NoSuchBucket)),
        }
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
