//! ACLs: GetBucketAcl, PutBucketAcl, GetObjectAcl, PutObjectAcl, and the ACL a write
//! (PUT, copy, CreateMultipartUpload, CreateBucket) asks for. In a BucketOwnerEnforced
//! bucket (the default) ACLs are disabled: an ACL reads as the owner's FULL_CONTROL and
//! setting anything wider is AccessControlListNotSupported, as in S3. With ACLs on
//! (BucketOwnerPreferred, ObjectWriter) grants are stored — the bucket's in its record,
//! a version's in its index entry — and `access` enforces them (docs/design.md, "ACL
//! grants").

use super::access::{Access, Need};
use super::dto::owner;
use super::Gateway;
use crate::acl::{self, AclError, AclTarget, Grant, Grantee, Permission};
use crate::buckets::{self, BucketError, BucketRecord};
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

/// The `x-amz-grant-*` headers of an input, with the permission each grants (`write`:
/// the inputs that have `x-amz-grant-write`, those of buckets and PutObjectAcl).
macro_rules! grant_headers {
    ($input:expr) => {
        [
            (
                $input.grant_full_control.as_deref(),
                $crate::acl::Permission::FullControl,
            ),
            ($input.grant_read.as_deref(), $crate::acl::Permission::Read),
            (
                $input.grant_read_acp.as_deref(),
                $crate::acl::Permission::ReadAcp,
            ),
            (
                $input.grant_write_acp.as_deref(),
                $crate::acl::Permission::WriteAcp,
            ),
        ]
    };
    ($input:expr, write) => {{
        let mut all = $crate::gateway::acl::grant_headers!($input).to_vec();
        all.push((
            $input.grant_write.as_deref(),
            $crate::acl::Permission::Write,
        ));
        all
    }};
}
pub(super) use grant_headers;

/// The owner and ACL of an object written by the caller of an input with ACL fields
/// (PutObject, CopyObject, CreateMultipartUpload) into `$bucket`.
macro_rules! object_acl_of {
    ($bucket:expr, $caller:expr, $input:expr) => {
        $crate::gateway::acl::object_acl(
            $bucket,
            $caller,
            $input.acl.as_ref().map(|a| a.as_str()),
            &$crate::gateway::acl::grant_headers!($input),
        )
    };
}
pub(super) use object_acl_of;

/// An ACL error as S3 answers it.
fn refused(e: AclError) -> S3Error {
    match e {
        AclError::Malformed(m) => s3_error!(InvalidArgument, "{m}"),
        AclError::Unsupported(m) => s3_error!(NotImplemented, "{m}"),
    }
}

/// AccessControlListNotSupported: the bucket's ACLs are disabled.
fn acls_disabled() -> S3Error {
    s3_error!(
        AccessControlListNotSupported,
        "The bucket does not allow ACLs (its object ownership is BucketOwnerEnforced)"
    )
}

/// The grants a request asks for with a canned ACL or grant headers (not both); None when
/// it names none.
fn asked(
    canned: Option<&str>,
    headers: &[(Option<&str>, Permission)],
    target: AclTarget,
    bucket_owner: &str,
) -> S3Result<Option<Vec<Grant>>> {
    let mut grants = Vec::new();
    let mut any_header = false;
    for (value, permission) in headers {
        if let Some(v) = value {
            any_header = true;
            grants.extend(acl::header(v, *permission).map_err(refused)?);
        }
    }
    match (canned, any_header) {
        (Some(_), true) => Err(s3_error!(
            InvalidRequest,
            "Specifying both Canned ACLs and Header Grants is not allowed"
        )),
        (Some(c), false) => Ok(Some(acl::canned(c, target, bucket_owner).map_err(refused)?)),
        (None, true) => Ok(Some(acl::normalise(grants).map_err(refused)?)),
        (None, false) => Ok(None),
    }
}

/// Whether `grants` say no more than the owner's FULL_CONTROL (what a bucket with ACLs
/// disabled accepts: `private`, `bucket-owner-full-control` and their equivalents).
fn owner_only(grants: &[Grant], owner: &str) -> bool {
    grants
        .iter()
        .all(|g| g.grantee == Grantee::User(owner.into()))
}

/// Refuse public `grants` when the bucket's public access block says BlockPublicAcls.
fn check_public(bucket: &BucketRecord, grants: &[Grant]) -> S3Result<()> {
    let block = bucket
        .public_access_block
        .is_some_and(|b| b.block_public_acls);
    if block && acl::is_public(grants) {
        return Err(s3_error!(
            AccessDenied,
            "the bucket's public access block (BlockPublicAcls) refuses public ACLs"
        ));
    }
    Ok(())
}

/// The owner (None: the bucket's) and ACL of an object `caller` writes into `bucket`
/// asking for `canned` or grant `headers`.
pub(super) fn object_acl(
    bucket: &BucketRecord,
    caller: Option<&str>,
    canned: Option<&str>,
    headers: &[(Option<&str>, Permission)],
) -> S3Result<(Option<String>, Vec<Grant>)> {
    let grants = asked(canned, headers, AclTarget::Object, &bucket.owner)?;
    let grants = grants.unwrap_or_default();
    if !bucket.ownership.acls_enabled() {
        if !owner_only(&grants, &bucket.owner) {
            return Err(acls_disabled());
        }
        return Ok((None, Vec::new()));
    }
    check_public(bucket, &grants)?;
    let owner = bucket.ownership.object_owner(&bucket.owner, caller, canned);
    // The owner's FULL_CONTROL is implied; a grant to the owner would only repeat it.
    let owner_name = owner.as_deref().unwrap_or(&bucket.owner);
    let grants = grants
        .into_iter()
        .filter(|g| g.grantee != Grantee::User(owner_name.into()))
        .collect();
    Ok((owner, grants))
}

/// The ACL a new bucket is created with (CreateBucket's canned ACL or grant headers):
/// only with ACLs enabled by its object ownership, as in S3.
pub(super) fn bucket_acl_on_create(
    input: &CreateBucketInput,
    owner_name: &str,
    ownership: acl::Ownership,
) -> S3Result<Vec<Grant>> {
    let canned = input.acl.as_ref().map(|a| a.as_str());
    let grants = asked(
        canned,
        &grant_headers!(input, write),
        AclTarget::Bucket,
        owner_name,
    )?;
    let grants = grants.unwrap_or_default();
    if !ownership.acls_enabled() && !owner_only(&grants, owner_name) {
        return Err(s3_error!(
            InvalidBucketAclWithObjectOwnership,
            "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting"
        ));
    }
    if !ownership.acls_enabled() {
        return Ok(Vec::new());
    }
    Ok(grants
        .into_iter()
        .filter(|g| g.grantee != Grantee::User(owner_name.into()))
        .collect())
}

/// The grants of an AccessControlPolicy document, whose Owner (if it names one) must be
/// `owner`: an ACL cannot change who owns a bucket or object.
fn document(policy: &AccessControlPolicy, owner_name: &str) -> S3Result<Vec<Grant>> {
    if let Some(id) = policy.owner.as_ref().and_then(|o| o.id.as_deref()) {
        if id != owner_name {
            return Err(s3_error!(
                AccessDenied,
                "the ACL names {id:?} as owner; the owner is {owner_name:?} and an ACL cannot \
                 change it"
            ));
        }
    }
    let mut out = Vec::new();
    for g in policy.grants.as_deref().unwrap_or_default() {
        let (Some(grantee), Some(permission)) = (&g.grantee, &g.permission) else {
            return Err(s3_error!(
                MalformedACLError,
                "a grant without grantee or permission"
            ));
        };
        let value = match grantee.type_.as_str() {
            "CanonicalUser" => grantee.id.as_deref(),
            "Group" => grantee.uri.as_deref(),
            _ => grantee.email_address.as_deref(),
        };
        let grantee = acl::grantee(grantee.type_.as_str(), value.unwrap_or_default()).map_err(
            |e| match e {
                AclError::Malformed(m) => s3_error!(MalformedACLError, "{m}"),
                other => refused(other),
            },
        )?;
        let permission = Permission::parse(permission.as_str())
            .map_err(|e| s3_error!(MalformedACLError, "{e}"))?;
        // The owner's own FULL_CONTROL is implied; keeping it would only repeat it.
        if grantee != Grantee::User(owner_name.into()) || permission != Permission::FullControl {
            out.push(Grant {
                grantee,
                permission,
            });
        }
    }
    acl::normalise(out).map_err(|e| s3_error!(MalformedACLError, "{e}"))
}

/// The ACL a Put*Acl request sets: a canned ACL, grant headers or a document (exactly one).
fn put_acl(
    canned: Option<&str>,
    headers: &[(Option<&str>, Permission)],
    document_: Option<&AccessControlPolicy>,
    target: AclTarget,
    owner_name: &str,
    bucket_owner: &str,
) -> S3Result<Vec<Grant>> {
    let from_headers = asked(canned, headers, target, bucket_owner)?;
    match (from_headers, document_) {
        (Some(_), Some(_)) => Err(s3_error!(
            UnexpectedContent,
            "an ACL in headers and an AccessControlPolicy document cannot be sent together"
        )),
        (Some(g), None) => Ok(g),
        (None, Some(d)) => document(d, owner_name),
        (None, None) => Err(s3_error!(
            MissingSecurityHeader,
            "an ACL, grant headers or an AccessControlPolicy document is required"
        )),
    }
}

/// An ACL as S3 shows it: the owner's FULL_CONTROL, then the grants.
fn shown(owner_name: &str, grants: &[Grant]) -> (Option<Owner>, Option<Grants>) {
    let mut out = vec![shown_grant(
        &Grantee::User(owner_name.into()),
        Permission::FullControl,
    )];
    out.extend(grants.iter().map(|g| shown_grant(&g.grantee, g.permission)));
    (Some(owner(owner_name)), Some(out))
}

fn shown_grant(grantee: &Grantee, permission: Permission) -> s3s::dto::Grant {
    let (type_, id, uri) = match grantee {
        Grantee::User(u) => (Type::CANONICAL_USER, Some(u.clone()), None),
        Grantee::AllUsers => (Type::GROUP, None, Some(acl::ALL_USERS.to_string())),
        Grantee::AuthenticatedUsers => (
            Type::GROUP,
            None,
            Some(acl::AUTHENTICATED_USERS.to_string()),
        ),
    };
    s3s::dto::Grant {
        grantee: Some(s3s::dto::Grantee {
            display_name: id.clone(),
            email_address: None,
            id,
            type_: Type::from_static(type_),
            uri,
        }),
        permission: Some(s3s::dto::Permission::from(permission.as_str().to_string())),
    }
}

/// GetBucketAcl: the owner's FULL_CONTROL and, with ACLs on, the bucket's grants.
pub(super) async fn get_bucket_acl(
    gw: &Gateway,
    req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    let need = Need::bucket("s3:GetBucketAcl");
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let (owner, grants) = shown(&bucket.owner, &bucket.acl);
    Ok(S3Response::new(GetBucketAclOutput { owner, grants }))
}

/// PutBucketAcl: replace the bucket's grants (with ACLs disabled, only the owner's
/// FULL_CONTROL can be set, which changes nothing).
pub(super) async fn put_bucket_acl(
    gw: &Gateway,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    let need = Need::bucket("s3:PutBucketAcl");
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let input = &req.input;
    let grants = put_acl(
        input.acl.as_ref().map(|a| a.as_str()),
        &grant_headers!(input, write),
        input.access_control_policy.as_ref(),
        AclTarget::Bucket,
        &bucket.owner,
        &bucket.owner,
    )?;
    if !bucket.ownership.acls_enabled() {
        return if owner_only(&grants, &bucket.owner) {
            Ok(S3Response::new(PutBucketAclOutput {}))
        } else {
            Err(acls_disabled())
        };
    }
    check_public(&bucket, &grants)?;
    buckets::update_bucket(&gw.cluster, &bucket.name, |r| {
        r.acl = grants.clone();
        Ok::<(), BucketError>(())
    })
    .await?;
    Ok(S3Response::new(PutBucketAclOutput {}))
}

/// GetObjectAcl: a version's owner with its FULL_CONTROL, and its grants.
pub(super) async fn get_object_acl(
    gw: &Gateway,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let need = Need::object("s3:GetObjectAcl", &req.input.key);
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let entry = gw
        .entry_version(&bucket, &req.input.key, req.input.version_id.as_deref())
        .await?;
    let (owner, grants) = if bucket.ownership.acls_enabled() {
        shown(entry.owner.as_deref().unwrap_or(&bucket.owner), &entry.acl)
    } else {
        shown(&bucket.owner, &[])
    };
    Ok(S3Response::new(GetObjectAclOutput {
        owner,
        grants,
        ..Default::default()
    }))
}

/// PutObjectAcl: replace a version's grants, atomically with other changes of its key.
pub(super) async fn put_object_acl(
    gw: &Gateway,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    let need = Need::object("s3:PutObjectAcl", &req.input.key);
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let input = &req.input;
    let canned = input.acl.as_ref().map(|a| a.as_str());
    let headers = grant_headers!(input, write);
    if headers[4].0.is_some() {
        return Err(s3_error!(
            InvalidArgument,
            "x-amz-grant-write does not apply to objects"
        ));
    }
    if !bucket.ownership.acls_enabled() {
        let grants = put_acl(
            canned,
            &headers,
            input.access_control_policy.as_ref(),
            AclTarget::Object,
            &bucket.owner,
            &bucket.owner,
        )?;
        if !owner_only(&grants, &bucket.owner) {
            return Err(acls_disabled());
        }
        gw.entry_version(&bucket, &input.key, input.version_id.as_deref())
            .await?;
        return Ok(S3Response::new(PutObjectAclOutput::default()));
    }
    // The document's Owner is checked against the version's owner, known once it is read.
    gw.change_version(
        &bucket,
        &input.key,
        input.version_id.as_deref(),
        |v| {
            let owner_name = v.owner.clone().unwrap_or_else(|| bucket.owner.clone());
            let grants = put_acl(
                canned,
                &headers,
                input.access_control_policy.as_ref(),
                AclTarget::Object,
                &owner_name,
                &bucket.owner,
            )?;
            check_public(&bucket, &grants)?;
            v.acl = grants;
            Ok(())
        },
        |_| false,
    )
    .await?;
    Ok(S3Response::new(PutObjectAclOutput::default()))
}

/// The ownership a request sets (PutBucketOwnershipControls: one rule).
pub(super) fn ownership_of(controls: &OwnershipControls) -> S3Result<acl::Ownership> {
    let [rule] = controls.rules.as_slice() else {
        return Err(s3_error!(
            MalformedXML,
            "OwnershipControls hold exactly one rule"
        ));
    };
    Ok(match rule.object_ownership.as_str() {
        ObjectOwnership::BUCKET_OWNER_ENFORCED => acl::Ownership::BucketOwnerEnforced,
        ObjectOwnership::BUCKET_OWNER_PREFERRED => acl::Ownership::BucketOwnerPreferred,
        ObjectOwnership::OBJECT_WRITER => acl::Ownership::ObjectWriter,
        other => {
            return Err(s3_error!(
                InvalidArgument,
                "unknown object ownership {other:?}"
            ))
        }
    })
}

/// The ownership controls as S3 shows them (None: there are none).
pub(super) fn shown_ownership(ownership: acl::Ownership) -> Option<OwnershipControls> {
    let name = match ownership {
        acl::Ownership::BucketOwnerEnforced => ObjectOwnership::BUCKET_OWNER_ENFORCED,
        acl::Ownership::BucketOwnerPreferred => ObjectOwnership::BUCKET_OWNER_PREFERRED,
        acl::Ownership::ObjectWriter => ObjectOwnership::OBJECT_WRITER,
        acl::Ownership::NoControls => return None,
    };
    Some(OwnershipControls {
        rules: vec![OwnershipControlsRule {
            object_ownership: ObjectOwnership::from_static(name),
        }],
    })
}

/// Set a bucket's object ownership. Disabling ACLs (BucketOwnerEnforced) needs a bucket
/// ACL that grants nothing beyond the owner, as in S3; the versions' ACLs then stop acting.
pub(super) async fn set_ownership(
    gw: &Gateway,
    bucket: &str,
    ownership: acl::Ownership,
) -> S3Result<()> {
    buckets::update_bucket(&gw.cluster, bucket, |r| {
        if !ownership.acls_enabled() && !r.acl.is_empty() {
            return Err(s3_error!(
                InvalidBucketAclWithObjectOwnership,
                "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced \
                 setting: set the bucket's ACL to private first"
            ));
        }
        r.ownership = ownership;
        Ok(())
    })
    .await
    .map_err(|e: S3Error| e)?;
    Ok(())
}

/// OwnershipControlsNotFoundError: the bucket has no ownership controls.
pub(super) fn no_ownership_controls() -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::OwnershipControlsNotFoundError,
        "The bucket ownership controls were not found",
    );
    e.set_status_code(http::StatusCode::NOT_FOUND);
    e
}
