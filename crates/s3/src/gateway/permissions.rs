//! Bucket policies, public access blocks and object ownership: PutBucketPolicy,
//! GetBucketPolicy, DeleteBucketPolicy, GetBucketPolicyStatus, Put/Get/DeletePublicAccessBlock
//! and Get/Put/DeleteBucketOwnershipControls. All of them are the bucket owner's alone; what
//! a policy allows is enforced by `access`.

use super::access::{Access, Need};
use super::Gateway;
use crate::buckets::{self, BucketError, PublicAccessBlock};
use crate::policy;
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result};

/// A refused policy as the S3 error its code names.
fn policy_error(e: policy::PolicyError) -> S3Error {
    let code = match e.code {
        "NotImplemented" => s3s::S3ErrorCode::NotImplemented,
        _ => s3s::S3ErrorCode::MalformedPolicy,
    };
    S3Error::with_message(code, e.message)
}

/// PutBucketPolicy: checked whole (anything outside the supported subset is refused by
/// name); a public one is refused while the bucket blocks public policies.
pub(super) async fn put_bucket_policy(
    gw: &Gateway,
    req: S3Request<PutBucketPolicyInput>,
) -> S3Result<S3Response<PutBucketPolicyOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let doc = req.input.policy;
    let parsed = policy::parse(&doc, &bucket.name).map_err(policy_error)?;
    buckets::update_bucket(&gw.cluster, &bucket.name, |r| {
        if parsed.is_public() && r.public_access_block.is_some_and(|b| b.block_public_policy) {
            return Err(s3_error!(
                AccessDenied,
                "the bucket's public access block forbids a public policy"
            ));
        }
        r.policy = Some(doc.clone());
        Ok(())
    })
    .await?;
    Ok(S3Response::new(PutBucketPolicyOutput {}))
}

/// GetBucketPolicy: the document as set, or NoSuchBucketPolicy.
pub(super) async fn get_bucket_policy(
    gw: &Gateway,
    req: S3Request<GetBucketPolicyInput>,
) -> S3Result<S3Response<GetBucketPolicyOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let policy = bucket.policy.ok_or_else(|| s3_error!(NoSuchBucketPolicy))?;
    Ok(S3Response::new(GetBucketPolicyOutput {
        policy: Some(policy),
    }))
}

/// DeleteBucketPolicy: no policy (absent is fine).
pub(super) async fn delete_bucket_policy(
    gw: &Gateway,
    req: S3Request<DeleteBucketPolicyInput>,
) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    buckets::update_bucket(&gw.cluster, &bucket.name, |r| {
        r.policy = None;
        Ok::<(), BucketError>(())
    })
    .await?;
    Ok(S3Response::new(DeleteBucketPolicyOutput {}))
}

/// GetBucketPolicyStatus: whether the policy grants everyone.
pub(super) async fn get_bucket_policy_status(
    gw: &Gateway,
    req: S3Request<GetBucketPolicyStatusInput>,
) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let doc = bucket.policy.ok_or_else(|| s3_error!(NoSuchBucketPolicy))?;
    let parsed = policy::parse(&doc, &bucket.name).map_err(policy_error)?;
    Ok(S3Response::new(GetBucketPolicyStatusOutput {
        policy_status: Some(PolicyStatus {
            is_public: Some(parsed.is_public()),
        }),
    }))
}

/// PutPublicAccessBlock: the four settings (absent ones are false).
pub(super) async fn put_public_access_block(
    gw: &Gateway,
    req: S3Request<PutPublicAccessBlockInput>,
) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let c = &req.input.public_access_block_configuration;
    let block = PublicAccessBlock {
        block_public_acls: c.block_public_acls.unwrap_or(false),
        ignore_public_acls: c.ignore_public_acls.unwrap_or(false),
        block_public_policy: c.block_public_policy.unwrap_or(false),
        restrict_public_buckets: c.restrict_public_buckets.unwrap_or(false),
    };
    buckets::update_bucket(&gw.cluster, &bucket.name, |r| {
        r.public_access_block = Some(block);
        Ok::<(), BucketError>(())
    })
    .await?;
    Ok(S3Response::new(PutPublicAccessBlockOutput {}))
}

/// GetPublicAccessBlock: the settings, or NoSuchPublicAccessBlockConfiguration.
pub(super) async fn get_public_access_block(
    gw: &Gateway,
    req: S3Request<GetPublicAccessBlockInput>,
) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let b = bucket.public_access_block.ok_or_else(|| {
        let mut e = S3Error::with_message(
            s3s::S3ErrorCode::Custom("NoSuchPublicAccessBlockConfiguration".into()),
            "The public access block configuration was not found",
        );
        e.set_status_code(http::StatusCode::NOT_FOUND);
        e
    })?;
    Ok(S3Response::new(GetPublicAccessBlockOutput {
        public_access_block_configuration: Some(PublicAccessBlockConfiguration {
            block_public_acls: Some(b.block_public_acls),
            ignore_public_acls: Some(b.ignore_public_acls),
            block_public_policy: Some(b.block_public_policy),
            restrict_public_buckets: Some(b.restrict_public_buckets),
        }),
    }))
}

/// DeletePublicAccessBlock: no block (absent is fine).
pub(super) async fn delete_public_access_block(
    gw: &Gateway,
    req: S3Request<DeletePublicAccessBlockInput>,
) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    buckets::update_bucket(&gw.cluster, &bucket.name, |r| {
        r.public_access_block = None;
        Ok::<(), BucketError>(())
    })
    .await?;
    Ok(S3Response::new(DeletePublicAccessBlockOutput {}))
}

/// GetBucketOwnershipControls: the bucket's object ownership, or
/// OwnershipControlsNotFoundError once they were deleted.
pub(super) async fn get_bucket_ownership_controls(
    gw: &Gateway,
    req: S3Request<GetBucketOwnershipControlsInput>,
) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let controls = super::acl::shown_ownership(bucket.ownership)
        .ok_or_else(super::acl::no_ownership_controls)?;
    Ok(S3Response::new(GetBucketOwnershipControlsOutput {
        ownership_controls: Some(controls),
    }))
}

/// PutBucketOwnershipControls: BucketOwnerEnforced (ACLs off), BucketOwnerPreferred or
/// ObjectWriter (ACLs on).
pub(super) async fn put_bucket_ownership_controls(
    gw: &Gateway,
    req: S3Request<PutBucketOwnershipControlsInput>,
) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let ownership = super::acl::ownership_of(&req.input.ownership_controls)?;
    super::acl::set_ownership(gw, &bucket.name, ownership).await?;
    Ok(S3Response::new(PutBucketOwnershipControlsOutput {}))
}

/// DeleteBucketOwnershipControls: no controls, which S3 treats as ObjectWriter (ACLs on).
pub(super) async fn delete_bucket_ownership_controls(
    gw: &Gateway,
    req: S3Request<DeleteBucketOwnershipControlsInput>,
) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    super::acl::set_ownership(gw, &bucket.name, crate::acl::Ownership::NoControls).await?;
    Ok(S3Response::new(DeleteBucketOwnershipControlsOutput {}))
}
