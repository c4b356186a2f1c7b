//! The S3 operations, on top of buckets (metadata), the bucket index and object data
//! (cluster objects). The protocol itself (routing, XML, SigV4, aws-chunked bodies) is the
//! `s3s` crate's; this module maps each operation onto the cluster.
//!
//! * `access`: who sent a request and whether they own the bucket it names.
//! * `unsupported`: what the gateway refuses rather than ignores.
//! * `errors`: the crate's errors as S3 errors.
//! * `dto`: index records to and from the protocol's types.
//! * `conditions`: `If-Match`, `If-None-Match`, `If-Modified-Since`, `If-Unmodified-Since`.
//! * `encryption`: SSE headers of requests and answers, bucket default encryption.
//! * `store`: bodies into data pieces, with intents and reclaim, and reads of them.
//! * `versioned`: a key's record read and changed (versions, delete markers, conditions).
//! * `bucket_ops`, `objects`, `listing`, `multipart`, `acl`, `permissions`, `tagging`,
//!   `lifecycle`, `cors`, `lock`: the operations (`lifecycle` also has the worker that applies the
//!   rules).

mod access;
mod acl;
mod bucket_ops;
mod conditions;
mod cors;
mod dto;
mod encryption;
mod errors;
pub mod lifecycle;
mod listing;
mod lock;
mod multipart;
mod objects;
mod permissions;
mod store;
mod tagging;
mod unsupported;
mod versioned;

use crate::data::DataIds;
use crate::keys::KeyRing;
use basalt_client::Cluster;
use basalt_proto::PoolId;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, S3};
use std::sync::Arc;

pub use access::Peer;
pub use multipart::{MAX_PART_NUMBER, MIN_PART_BYTES};
pub use objects::MAX_PUT_BYTES;

/// The gateway: stateless apart from caches; several can serve the same buckets.
pub struct Gateway {
    cluster: Arc<Cluster>,
    keys: Arc<KeyRing>,
    ids: DataIds,
    /// Pool new buckets' indexes are created in.
    pool: PoolId,
    /// Pool new buckets' data is created in (None: `pool`).
    data_pool: Option<PoolId>,
    /// How often a live upload refreshes its intent (see `sweeper`).
    refresh: std::time::Duration,
    /// What this gateway answered.
    stats: Arc<crate::stats::GatewayStats>,
}

impl Gateway {
    /// A gateway over `cluster` that authenticates with `keys`, creates buckets in `pool`
    /// and keeps the intents of live uploads fresh for a sweeper that waits `reclaim_after`.
    pub fn new(
        cluster: Arc<Cluster>,
        keys: Arc<KeyRing>,
        pool: PoolId,
        data_pool: Option<PoolId>,
        reclaim_after: std::time::Duration,
    ) -> Self {
        Self {
            cluster,
            keys,
            ids: DataIds::default(),
            pool,
            data_pool,
            refresh: crate::sweeper::intent_refresh(reclaim_after),
            stats: Arc::default(),
        }
    }

    /// Count this gateway's work in `stats` (shared with a metrics endpoint).
    pub fn with_stats(mut self, stats: Arc<crate::stats::GatewayStats>) -> Self {
        self.stats = stats;
        self
    }
}

/// Implement `S3` by handing each operation to the function of the same name in its module:
/// one line per operation, so this table is the list of what the gateway serves.
macro_rules! operations {
    ($($module:ident :: $op:ident($input:ident) -> $output:ident;)*) => {
        #[async_trait::async_trait]
        impl S3 for Gateway {
            $(
                async fn $op(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    $module::$op(self, req).await
                }
            )*
        }
    };
}

operations! {
    listing::list_buckets(ListBucketsInput) -> ListBucketsOutput;
    bucket_ops::create_bucket(CreateBucketInput) -> CreateBucketOutput;
    bucket_ops::delete_bucket(DeleteBucketInput) -> DeleteBucketOutput;
    bucket_ops::head_bucket(HeadBucketInput) -> HeadBucketOutput;
    bucket_ops::get_bucket_location(GetBucketLocationInput) -> GetBucketLocationOutput;
    versioned::put_bucket_versioning(PutBucketVersioningInput) -> PutBucketVersioningOutput;
    versioned::get_bucket_versioning(GetBucketVersioningInput) -> GetBucketVersioningOutput;
    permissions::put_bucket_policy(PutBucketPolicyInput) -> PutBucketPolicyOutput;
    permissions::get_bucket_policy(GetBucketPolicyInput) -> GetBucketPolicyOutput;
    permissions::delete_bucket_policy(DeleteBucketPolicyInput) -> DeleteBucketPolicyOutput;
    permissions::get_bucket_policy_status(GetBucketPolicyStatusInput) -> GetBucketPolicyStatusOutput;
    permissions::put_public_access_block(PutPublicAccessBlockInput) -> PutPublicAccessBlockOutput;
    permissions::get_public_access_block(GetPublicAccessBlockInput) -> GetPublicAccessBlockOutput;
    permissions::delete_public_access_block(DeletePublicAccessBlockInput) -> DeletePublicAccessBlockOutput;
    permissions::get_bucket_ownership_controls(GetBucketOwnershipControlsInput) -> GetBucketOwnershipControlsOutput;
    permissions::put_bucket_ownership_controls(PutBucketOwnershipControlsInput) -> PutBucketOwnershipControlsOutput;
    permissions::delete_bucket_ownership_controls(DeleteBucketOwnershipControlsInput) -> DeleteBucketOwnershipControlsOutput;
    tagging::put_object_tagging(PutObjectTaggingInput) -> PutObjectTaggingOutput;
    tagging::get_object_tagging(GetObjectTaggingInput) -> GetObjectTaggingOutput;
    tagging::delete_object_tagging(DeleteObjectTaggingInput) -> DeleteObjectTaggingOutput;
    tagging::put_bucket_tagging(PutBucketTaggingInput) -> PutBucketTaggingOutput;
    tagging::get_bucket_tagging(GetBucketTaggingInput) -> GetBucketTaggingOutput;
    tagging::delete_bucket_tagging(DeleteBucketTaggingInput) -> DeleteBucketTaggingOutput;
    tagging::get_object_attributes(GetObjectAttributesInput) -> GetObjectAttributesOutput;
    lifecycle::put_bucket_lifecycle_configuration(PutBucketLifecycleConfigurationInput) -> PutBucketLifecycleConfigurationOutput;
    lifecycle::get_bucket_lifecycle_configuration(GetBucketLifecycleConfigurationInput) -> GetBucketLifecycleConfigurationOutput;
    lifecycle::delete_bucket_lifecycle(DeleteBucketLifecycleInput) -> DeleteBucketLifecycleOutput;
    cors::put_bucket_cors(PutBucketCorsInput) -> PutBucketCorsOutput;
    cors::get_bucket_cors(GetBucketCorsInput) -> GetBucketCorsOutput;
    cors::delete_bucket_cors(DeleteBucketCorsInput) -> DeleteBucketCorsOutput;
    lock::put_object_lock_configuration(PutObjectLockConfigurationInput) -> PutObjectLockConfigurationOutput;
    lock::get_object_lock_configuration(GetObjectLockConfigurationInput) -> GetObjectLockConfigurationOutput;
    lock::put_object_retention(PutObjectRetentionInput) -> PutObjectRetentionOutput;
    lock::get_object_retention(GetObjectRetentionInput) -> GetObjectRetentionOutput;
    lock::put_object_legal_hold(PutObjectLegalHoldInput) -> PutObjectLegalHoldOutput;
    lock::get_object_legal_hold(GetObjectLegalHoldInput) -> GetObjectLegalHoldOutput;
    encryption::put_bucket_encryption(PutBucketEncryptionInput) -> PutBucketEncryptionOutput;
    encryption::get_bucket_encryption(GetBucketEncryptionInput) -> GetBucketEncryptionOutput;
    encryption::delete_bucket_encryption(DeleteBucketEncryptionInput) -> DeleteBucketEncryptionOutput;
    acl::get_bucket_acl(GetBucketAclInput) -> GetBucketAclOutput;
    acl::put_bucket_acl(PutBucketAclInput) -> PutBucketAclOutput;
    acl::get_object_acl(GetObjectAclInput) -> GetObjectAclOutput;
    acl::put_object_acl(PutObjectAclInput) -> PutObjectAclOutput;
    objects::put_object(PutObjectInput) -> PutObjectOutput;
    objects::get_object(GetObjectInput) -> GetObjectOutput;
    objects::head_object(HeadObjectInput) -> HeadObjectOutput;
    objects::delete_object(DeleteObjectInput) -> DeleteObjectOutput;
    objects::delete_objects(DeleteObjectsInput) -> DeleteObjectsOutput;
    objects::copy_object(CopyObjectInput) -> CopyObjectOutput;
    listing::list_objects(ListObjectsInput) -> ListObjectsOutput;
    listing::list_objects_v2(ListObjectsV2Input) -> ListObjectsV2Output;
    listing::list_object_versions(ListObjectVersionsInput) -> ListObjectVersionsOutput;
    multipart::create_multipart_upload(CreateMultipartUploadInput) -> CreateMultipartUploadOutput;
    multipart::upload_part(UploadPartInput) -> UploadPartOutput;
    multipart::upload_part_copy(UploadPartCopyInput) -> UploadPartCopyOutput;
    multipart::complete_multipart_upload(CompleteMultipartUploadInput) -> CompleteMultipartUploadOutput;
    multipart::abort_multipart_upload(AbortMultipartUploadInput) -> AbortMultipartUploadOutput;
    listing::list_parts(ListPartsInput) -> ListPartsOutput;
    listing::list_multipart_uploads(ListMultipartUploadsInput) -> ListMultipartUploadsOutput;
}
