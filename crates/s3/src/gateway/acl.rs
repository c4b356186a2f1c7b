//! ACL operations: GetBucketAcl, PutBucketAcl, GetObjectAcl and PutObjectAcl. Buckets and
//! objects are private to the bucket's owner (grants and policies are not built yet), so an
//! ACL reads as the owner's FULL_CONTROL, and setting one is accepted only when it says
//! exactly that (tools set `private` routinely); anything wider is NotImplemented.

use super::access::{Access, Need};
use super::dto::owner;
use super::unsupported::check_acl;
use super::Gateway;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

/// The one ACL every bucket and object has: its owner's FULL_CONTROL.
fn owner_only(user: &str) -> (Option<Owner>, Option<Grants>) {
    let grant = Grant {
        grantee: Some(Grantee {
            display_name: Some(user.into()),
            email_address: None,
            id: Some(user.into()),
            type_: Type::from_static(Type::CANONICAL_USER),
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    };
    (Some(owner(user)), Some(vec![grant]))
}

/// Whether an AccessControlPolicy document grants exactly FULL_CONTROL to `user`.
fn is_owner_only(policy: &AccessControlPolicy, user: &str) -> bool {
    let grants = policy.grants.as_deref().unwrap_or_default();
    let owner_ok = policy
        .owner
        .as_ref()
        .and_then(|o| o.id.as_deref())
        .is_none_or(|id| id == user);
    owner_ok
        && grants.len() == 1
        && grants.iter().all(|g| {
            g.permission.as_ref().map(|p| p.as_str()) == Some(Permission::FULL_CONTROL)
                && g.grantee.as_ref().is_some_and(|e| {
                    e.type_.as_str() == Type::CANONICAL_USER && e.id.as_deref() == Some(user)
                })
        })
}

/// Check the ACL a Put*Acl request sets: a canned one, grant headers or a document.
macro_rules! check_put_acl {
    ($input:expr, $user:expr) => {{
        let input = &$input;
        let grants = input.grant_full_control.is_some()
            || input.grant_read.is_some()
            || input.grant_read_acp.is_some()
            || input.grant_write.is_some()
            || input.grant_write_acp.is_some();
        check_acl(input.acl.as_ref().map(|a| a.as_str()), grants)?;
        match (&input.acl, &input.access_control_policy) {
            (None, None) if !grants => {
                return Err(s3_error!(
                    MissingSecurityHeader,
                    "an ACL, grant headers or an AccessControlPolicy document is required"
                ))
            }
            (Some(_), Some(_)) => {
                return Err(s3_error!(
                    UnexpectedContent,
                    "a canned ACL and an AccessControlPolicy document cannot be sent together"
                ))
            }
            (None, Some(policy)) if !is_owner_only(policy, $user) => {
                return Err(s3_error!(
                    NotImplemented,
                    "ACL grants are not supported yet: only the owner's FULL_CONTROL can be set"
                ))
            }
            _ => {}
        }
    }};
}

/// GetBucketAcl: the owner's FULL_CONTROL.
pub(super) async fn get_bucket_acl(
    gw: &Gateway,
    req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let (owner, grants) = owner_only(&bucket.owner);
    Ok(S3Response::new(GetBucketAclOutput { owner, grants }))
}

/// PutBucketAcl: accepted when it sets what the bucket has (see the module's docs).
pub(super) async fn put_bucket_acl(
    gw: &Gateway,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    check_put_acl!(req.input, &bucket.owner);
    Ok(S3Response::new(PutBucketAclOutput {}))
}

/// GetObjectAcl: the bucket owner's FULL_CONTROL, for an object that exists.
pub(super) async fn get_object_acl(
    gw: &Gateway,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    gw.entry_version(&bucket, &req.input.key, req.input.version_id.as_deref())
        .await?;
    let (owner, grants) = owner_only(&bucket.owner);
    Ok(S3Response::new(GetObjectAclOutput {
        owner,
        grants,
        ..Default::default()
    }))
}

/// PutObjectAcl: accepted when it sets what the object has, on an object that exists.
pub(super) async fn put_object_acl(
    gw: &Gateway,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    check_put_acl!(req.input, &bucket.owner);
    gw.entry_version(&bucket, &req.input.key, req.input.version_id.as_deref())
        .await?;
    Ok(S3Response::new(PutObjectAclOutput::default()))
}
