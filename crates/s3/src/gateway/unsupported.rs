//! What the gateway does not implement, refused where a request asks for it: a write that
//! ignored a storage class would leave the client
//! believing something that is not true (issue 13's rule: never a success that ignores
//! part of a request).

use s3s::{s3_error, S3Result};

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
/// fields alike) asks for and the gateway does not implement: SSE-KMS, website
/// redirects, storage classes (ACLs are `acl::object_acl_of`'s).
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

    /// Goal: what the gateway does not do is refused, never ignored.
    #[test]
    fn refusals() {
        assert!(check_storage_class(Some("STANDARD")).is_ok());
        assert!(check_storage_class(Some("GLACIER")).is_err());
        assert!(check_version(Some("null")).is_ok());
        assert!(check_version(Some("3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY")).is_err());
    }
}
