//! CORS configuration: PutBucketCors, GetBucketCors, DeleteBucketCors. The rules are applied
//! by the front service of `server` (preflights and response headers), which sees requests
//! before the protocol layer does.

use super::access::{Access, Need};
use super::Gateway;
use crate::buckets::{self, BucketError};
use crate::cors::{self, Rule};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

/// PutBucketCors: the rules, checked whole, replace the bucket's.
pub(super) async fn put_bucket_cors(
    gw: &Gateway,
    req: S3Request<PutBucketCorsInput>,
) -> S3Result<S3Response<PutBucketCorsOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let rules: Vec<Rule> = req
        .input
        .cors_configuration
        .cors_rules
        .into_iter()
        .map(|r| Rule {
            id: r.id,
            origins: r.allowed_origins,
            methods: r.allowed_methods,
            headers: r
                .allowed_headers
                .unwrap_or_default()
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            expose: r.expose_headers.unwrap_or_default(),
            max_age: r.max_age_seconds,
        })
        .collect();
    cors::check(&rules).map_err(|m| s3_error!(InvalidRequest, "{m}"))?;
    buckets::update_bucket(&gw.cluster, &bucket.name, |r| {
        r.cors = rules.clone();
        Ok::<(), BucketError>(())
    })
    .await?;
    Ok(S3Response::new(PutBucketCorsOutput {}))
}

/// GetBucketCors: the rules, or NoSuchCORSConfiguration.
pub(super) async fn get_bucket_cors(
    gw: &Gateway,
    req: S3Request<GetBucketCorsInput>,
) -> S3Result<S3Response<GetBucketCorsOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    if bucket.cors.is_empty() {
        return Err(s3_error!(NoSuchCORSConfiguration));
    }
    let rules = bucket
        .cors
        .iter()
        .map(|r| CORSRule {
            id: r.id.clone(),
            allowed_origins: r.origins.clone(),
            allowed_methods: r.methods.clone(),
            allowed_headers: (!r.headers.is_empty()).then(|| r.headers.clone()),
            expose_headers: (!r.expose.is_empty()).then(|| r.expose.clone()),
            max_age_seconds: r.max_age,
        })
        .collect();
    Ok(S3Response::new(GetBucketCorsOutput {
        cors_rules: Some(rules),
    }))
}

/// DeleteBucketCors: no rules (absent is fine).
pub(super) async fn delete_bucket_cors(
    gw: &Gateway,
    req: S3Request<DeleteBucketCorsInput>,
) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    buckets::update_bucket(&gw.cluster, &bucket.name, |r| {
        r.cors.clear();
        Ok::<(), BucketError>(())
    })
    .await?;
    Ok(S3Response::new(DeleteBucketCorsOutput {}))
}
