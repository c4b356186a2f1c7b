//! The crate's errors as S3 errors, mapped once here: what a client may act on gets its own
//! code, anything else is an InternalError (and logged, since this is where it is handled).

use crate::buckets::BucketError;
use crate::data::DataError;
use crate::index::IndexError;
use s3s::{s3_error, S3Error};

/// An error the client cannot act on: logged, and answered as InternalError.
pub(super) fn internal(e: impl std::fmt::Display) -> S3Error {
    tracing::error!("s3: {e}");
    s3_error!(InternalError, "{e}")
}

impl From<IndexError> for S3Error {
    fn from(e: IndexError) -> Self {
        internal(e)
    }
}

impl From<BucketError> for S3Error {
    fn from(e: BucketError) -> Self {
        match e {
            BucketError::Exists(_) => s3_error!(BucketAlreadyExists),
            BucketError::Missing(_) => s3_error!(NoSuchBucket),
            other => internal(other),
        }
    }
}

impl From<DataError> for S3Error {
    fn from(e: DataError) -> Self {
        match e {
            DataError::TooLarge { .. } => s3_error!(EntityTooLarge, "{e}"),
            DataError::Length { .. } => s3_error!(IncompleteBody, "{e}"),
            DataError::Body(_) => s3_error!(IncompleteBody, "{e}"),
            DataError::Client(basalt_client::ClientError::Status {
                status: basalt_proto::Status::NoSpace,
            }) => s3_error!(ServiceUnavailable, "the cluster is out of space"),
            other => internal(other),
        }
    }
}
