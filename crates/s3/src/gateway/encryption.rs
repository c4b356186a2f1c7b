//! Server-side encryption as the operations meet it: the SSE headers of a request turned into
//! a new object's encryption or into the key of an existing one, and the SSE headers of an
//! answer. The cipher and key handling are `crate::sse`'s.

use super::access::{Access, Need};
use super::Gateway;
use crate::buckets::{self, BucketError, BucketRecord};
use crate::sse::{CustomerKey, PieceKey, Sse};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

/// The SSE-C key of an input's `sse_customer_*` fields (or, with `copy source`, of its
/// `copy_source_sse_customer_*` fields), checked.
macro_rules! customer_key_of {
    ($input:expr) => {
        $crate::sse::customer_key(
            $input.sse_customer_algorithm.as_deref(),
            $input.sse_customer_key.as_deref(),
            $input.sse_customer_key_md5.as_deref(),
        )
    };
    (copy source of $input:expr) => {
        $crate::sse::customer_key(
            $input.copy_source_sse_customer_algorithm.as_deref(),
            $input.copy_source_sse_customer_key.as_deref(),
            $input.copy_source_sse_customer_key_md5.as_deref(),
        )
    };
}
pub(super) use customer_key_of;

/// The SSE fields of an answer (`$output` names them alike: PutObject, GetObject, HeadObject,
/// CopyObject, UploadPart, CreateMultipartUpload) for an object encrypted with `$sse`.
macro_rules! answer_sse {
    ($output:ident, $sse:expr) => {
        match $sse {
            Some($crate::sse::Sse::S3 { .. }) => {
                $output.server_side_encryption = Some(s3s::dto::ServerSideEncryption::from_static(
                    s3s::dto::ServerSideEncryption::AES256,
                ));
            }
            Some(c @ $crate::sse::Sse::Customer { .. }) => {
                $output.sse_customer_algorithm = Some("AES256".into());
                $output.sse_customer_key_md5 = c.customer_md5();
            }
            None => {}
        }
    };
}
pub(super) use answer_sse;

impl Gateway {
    /// The encryption of a new object in `bucket`: SSE-C with the request's customer key,
    /// SSE-S3 when it asks for `AES256` or names nothing in a bucket with default encryption,
    /// none otherwise (SSE-KMS is refused before this).
    pub(super) fn new_sse(
        &self,
        bucket: &BucketRecord,
        customer: Option<&CustomerKey>,
        requested: Option<&ServerSideEncryption>,
    ) -> S3Result<Option<(Sse, PieceKey)>> {
        let s3 = match requested.map(|r| r.as_str()) {
            None => customer.is_none() && bucket.default_sse,
            Some(ServerSideEncryption::AES256) => true,
            Some(other) => {
                return Err(s3_error!(
                    NotImplemented,
                    "server-side encryption {other:?} is not supported (AES256 and SSE-C are)"
                ))
            }
        };
        Sse::for_request(self.keys.master(), customer, s3)
    }

    /// The key of an existing object encrypted with `sse`, from the request's customer key
    /// for SSE-C; SSE-C headers for an object not encrypted with them are refused.
    pub(super) fn open_sse(
        &self,
        sse: &Option<Sse>,
        customer: Option<&CustomerKey>,
    ) -> S3Result<Option<PieceKey>> {
        match (sse, customer) {
            (None, None) => Ok(None),
            (None, Some(_)) | (Some(Sse::S3 { .. }), Some(_)) => Err(s3_error!(
                InvalidRequest,
                "The encryption parameters are not applicable to this object"
            )),
            (Some(sse), customer) => Ok(Some(sse.key(self.keys.master(), customer)?)),
        }
    }
}

/// PutBucketEncryption: SSE-S3 (`AES256`) for new objects that name no encryption. One rule;
/// SSE-KMS and bucket keys are NotImplemented.
pub(super) async fn put_bucket_encryption(
    gw: &Gateway,
    req: S3Request<PutBucketEncryptionInput>,
) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let rules = &req.input.server_side_encryption_configuration.rules;
    let [rule] = rules.as_slice() else {
        return Err(s3_error!(
            MalformedXML,
            "a server-side encryption configuration has exactly one rule"
        ));
    };
    let Some(default) = &rule.apply_server_side_encryption_by_default else {
        return Err(s3_error!(
            MalformedXML,
            "the rule needs ApplyServerSideEncryptionByDefault"
        ));
    };
    if default.sse_algorithm.as_str() != ServerSideEncryption::AES256
        || default.kms_master_key_id.is_some()
        || rule.bucket_key_enabled == Some(true)
    {
        return Err(s3_error!(
            NotImplemented,
            "default encryption other than AES256 (SSE-S3) is not supported"
        ));
    }
    buckets::update_bucket(&gw.cluster, &bucket.name, |r| {
        r.default_sse = true;
        Ok::<(), BucketError>(())
    })
    .await?;
    Ok(S3Response::new(PutBucketEncryptionOutput {}))
}

/// GetBucketEncryption: SSE-S3 when set, else ServerSideEncryptionConfigurationNotFoundError.
pub(super) async fn get_bucket_encryption(
    gw: &Gateway,
    req: S3Request<GetBucketEncryptionInput>,
) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    if !bucket.default_sse {
        return Err(s3_error!(ServerSideEncryptionConfigurationNotFoundError));
    }
    Ok(S3Response::new(GetBucketEncryptionOutput {
        server_side_encryption_configuration: Some(ServerSideEncryptionConfiguration {
            rules: vec![ServerSideEncryptionRule {
                apply_server_side_encryption_by_default: Some(ServerSideEncryptionByDefault {
                    kms_master_key_id: None,
                    sse_algorithm: ServerSideEncryption::from_static(ServerSideEncryption::AES256),
                }),
                bucket_key_enabled: None,
            }],
        }),
    }))
}

/// DeleteBucketEncryption: new objects are stored as they ask again.
pub(super) async fn delete_bucket_encryption(
    gw: &Gateway,
    req: S3Request<DeleteBucketEncryptionInput>,
) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    buckets::update_bucket(&gw.cluster, &bucket.name, |r| {
        r.default_sse = false;
        Ok::<(), BucketError>(())
    })
    .await?;
    Ok(S3Response::new(DeleteBucketEncryptionOutput {}))
}
