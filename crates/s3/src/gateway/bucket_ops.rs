//! Bucket operations: CreateBucket, DeleteBucket, HeadBucket and GetBucketLocation
//! (ListBuckets is with the other listings).

use super::access::{Access, Need};
use super::Gateway;
use crate::buckets;
use crate::index;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

/// CreateBucket: a new bucket owned by the caller, in the gateway's pool.
pub(super) async fn create_bucket(
    gw: &Gateway,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    // Only the caller: the bucket is to be created, so there is no owner to check yet.
    let user = gw.signed_caller(&req).await?;
    let input = &req.input;
    let ownership = match &input.object_ownership {
        None => crate::acl::Ownership::BucketOwnerEnforced,
        Some(o) => super::acl::ownership_of(&OwnershipControls {
            rules: vec![OwnershipControlsRule {
                object_ownership: o.clone(),
            }],
        })?,
    };
    let acl = super::acl::bucket_acl_on_create(input, &user, ownership)?;
    let location = input
        .create_bucket_configuration
        .as_ref()
        .and_then(|c| c.location_constraint.as_ref())
        .map(|l| l.as_str());
    if let Some(l) = location.filter(|l| !l.is_empty() && *l != "us-east-1") {
        return Err(s3_error!(
            InvalidLocationConstraint,
            "the location constraint {l:?} is not this gateway's region (us-east-1)"
        ));
    }
    if input
        .create_bucket_configuration
        .as_ref()
        .is_some_and(|c| c.bucket.is_some() || c.location.is_some())
    {
        return Err(s3_error!(
            NotImplemented,
            "directory buckets (Bucket and Location in CreateBucketConfiguration) are not supported"
        ));
    }
    let name = &req.input.bucket;
    if let Some(existing) = buckets::get_bucket(&gw.cluster, name).await? {
        if existing.owner != user {
            return Err(s3_error!(BucketAlreadyExists));
        }
        // Re-creating one's own bucket succeeds, as in us-east-1 (the only region here).
        return Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{name}")),
        }));
    }
    buckets::create_bucket(
        &gw.cluster,
        name,
        &user,
        (gw.pool, gw.data_pool),
        ownership,
        acl,
    )
    .await?;
    if req.input.object_lock_enabled_for_bucket == Some(true) {
        // Object lock needs versioning, which then can never be suspended.
        buckets::update_bucket(&gw.cluster, name, |r| {
            r.versioning = Some(buckets::Versioning::Enabled);
            r.object_lock = Some(crate::lock::BucketLock::default());
            Ok::<(), buckets::BucketError>(())
        })
        .await?;
    }
    Ok(S3Response::new(CreateBucketOutput {
        location: Some(format!("/{name}")),
    }))
}

/// DeleteBucket: only an empty bucket goes, with every cluster object under it.
pub(super) async fn delete_bucket(
    gw: &Gateway,
    req: S3Request<DeleteBucketInput>,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    if !index::is_empty(&gw.cluster, &bucket).await? {
        return Err(s3_error!(BucketNotEmpty));
    }
    buckets::delete_bucket(&gw.cluster, &bucket).await?;
    Ok(S3Response::new(DeleteBucketOutput {}))
}

/// HeadBucket: whether the bucket exists and is the caller's.
pub(super) async fn head_bucket(
    gw: &Gateway,
    req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    gw.authorise(&req, &req.input.bucket, Need::bucket("s3:ListBucket"))
        .await?;
    Ok(S3Response::new(HeadBucketOutput::default()))
}

/// GetBucketLocation: the default region.
pub(super) async fn get_bucket_location(
    gw: &Gateway,
    req: S3Request<GetBucketLocationInput>,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    gw.authorise(
        &req,
        &req.input.bucket,
        Need::bucket("s3:GetBucketLocation"),
    )
    .await?;
    // Empty: the default region, as S3 answers for us-east-1.
    Ok(S3Response::new(GetBucketLocationOutput::default()))
}
