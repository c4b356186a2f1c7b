//! What the gateway does not implement, refused where a request asks for it: a write that
//! ignored an ACL or a storage class would leave the client
//! believing something that is not true (issue 13's rule: never a success that ignores
//! part of a request).

use s3s::{s3_error, S3Result};

/// Canned ACLs the gateway honours. Buckets and objects are private to the bucket's owner
/// (no grants, no cross-user access yet), so `private` is what every object is, and the
/// bucket-owner ACLs say the same thing since only the owner writes.
const HONOURED_CANNED: &[&str] = &["private", "bucket-owner-full-control", "bucket-owner-read"];

/// A canned ACL (`x-amz-acl`) and whether grant headers (`x-amz-grant-*`) came with it:
/// fine if it is one the gateway honours, NotImplemented otherwise.
pub(super) fn check_acl(canned: Option<&str>, grants: bool) -> S3Result<()> {
    if grants {
        return Err(s3_error!(
            NotImplemented,
            "ACL grants (x-amz-grant-*) are not supported yet: buckets and objects are \
             private to the bucket's owner"
        ));
    }
    match canned {
        None => Ok(()),
        Some(acl) if HONOURED_CANNED.contains(&acl) => Ok(()),
        Some(acl) => Err(s3_error!(
            NotImplemented,
            "canned ACL {acl:?} is not supported yet: buckets and objects are private to \
             the bucket's owner (\"private\" is accepted)"
        )),
    }
}

/// A storage class on a write: the cluster has one, STANDARD.
pub(super) fn check_storage_class(class: Option<&str>) -> S3Result<()> {
    match class {
        None | Some("STANDARD") => Ok(()),
        Some(other) => Err(s3_error!(
            NotImplemented,
            "storage class {other:?} is not supported: every object is STANDARD"
        )),
    }
}

/// Refuse what a PutObject, CopyObject or CreateMultipartUpload input (they name these
/// fields alike) asks for and the gateway does not implement: SSE-KMS, ACLs
/// other than private, website redirects, storage classes.
macro_rules! refuse_unsupported_put {
    ($input:expr) => {
        if $input.ssekms_key_id.is_some()
            || $input.ssekms_encryption_context.is_some()
            || $input.bucket_key_enabled.is_some()
        {
            return Err(s3s::s3_error!(
                NotImplemented,
                "SSE-KMS is not supported (SSE-S3 and SSE-C are)"
            ));
        }
        $crate::gateway::unsupported::check_acl(
            $input.acl.as_ref().map(|a| a.as_str()),
            $input.grant_full_control.is_some()
                || $input.grant_read.is_some()
                || $input.grant_read_acp.is_some()
                || $input.grant_write_acp.is_some(),
        )?;
        if $input.website_redirect_location.is_some() {
            return Err(s3s::s3_error!(
                NotImplemented,
                "website redirects are not supported"
            ));
        }
        $crate::gateway::unsupported::check_storage_class(
            $input.storage_class.as_ref().map(|c| c.as_str()),
        )?;
    };
}
pub(super) use refuse_unsupported_put;

/// A version id on a request about one object. Buckets are not versioned yet, so every
/// object is the version S3 calls `null`; any other id names no version of it.
pub(super) fn check_version(version_id: Option<&str>) -> S3Result<()> {
    match version_id {
        None | Some("null") => Ok(()),
        Some(_) => Err(s3_error!(InvalidArgument, "Invalid version id specified")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: only the ACLs that describe what the gateway does are accepted; grants and
    /// public ACLs are refused, never ignored.
    #[test]
    fn acls() {
        assert!(check_acl(None, false).is_ok());
        assert!(check_acl(Some("private"), false).is_ok());
        assert!(check_acl(Some("bucket-owner-full-control"), false).is_ok());
        for refused in [
            "public-read",
            "public-read-write",
            "authenticated-read",
            "x",
        ] {
            let e = check_acl(Some(refused), false).expect_err(refused);
            assert_eq!(e.code().as_str(), "NotImplemented");
        }
        assert!(check_acl(Some("private"), true).is_err());
        assert!(check_storage_class(Some("STANDARD")).is_ok());
        assert!(check_storage_class(Some("GLACIER")).is_err());
        assert!(check_version(Some("null")).is_ok());
        assert!(check_version(Some("3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY")).is_err());
    }
}
