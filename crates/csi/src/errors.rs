//! Client errors as the gRPC status codes the CSI spec prescribes.

use basalt_client::{ClientError, ErrorKind};
use tonic::Status;

/// `e` as a gRPC status: not found, exists, a conflict with the state of something else
/// (FailedPrecondition), a bad request (InvalidArgument), a wait that ran out
/// (DeadlineExceeded), anything else (the cluster unreachable: Unavailable).
pub fn status(e: ClientError) -> Status {
    let message = e.to_string();
    match e.kind() {
        ErrorKind::NotFound => Status::not_found(message),
        ErrorKind::Exists => Status::already_exists(message),
        ErrorKind::Conflict => Status::failed_precondition(message),
        ErrorKind::Invalid => Status::invalid_argument(message),
        ErrorKind::Timeout => Status::deadline_exceeded(message),
        ErrorKind::Other => Status::unavailable(message),
    }
}

/// A required request field left empty.
pub fn missing(field: &str) -> Status {
    Status::invalid_argument(format!("{field} is required"))
}
