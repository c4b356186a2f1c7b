//! The control API of `basalt up` as the commands here call it (`basalt_control` owns the
//! protocol, the server and the client).

pub use basalt_control::{call, call_with_progress, s3_key_request, Request, Response, S3Key};
