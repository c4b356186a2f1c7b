//! The control API of `basalt up`: one JSON request per line over a unix socket (mode
//! 0600: only its owner may manage the cluster), one JSON reply per line. The CLI's
//! volume, image, objvol, pool, scrub, status and S3 key commands speak it; with `--meta`
//! they run the same handlers in their own process ([`run_local`]).
//!
//! `protocol` is the wire format; `server` accepts and dispatches, one module per request
//! family handles (`volumes`, `images`, `pools`, `objvols`, `s3keys`, `reports`);
//! `client` calls it.

mod client;
mod images;
mod local;
mod objvols;
mod pools;
mod protocol;
mod reports;
mod s3keys;
mod server;
mod socket;
mod volumes;

pub use client::{call, call_with_progress, ControlError};
pub use local::run_local;
pub use pools::pool_in_map;
pub use protocol::{LockAction, LockReport, ProgressLine, Request, Response, S3Key, VolumeIo};
pub use s3keys::s3_key_request;
pub use server::{handle, serve, ServeContext, Throttle, PROGRESS_EVERY_MS};
pub use socket::bind_private_socket;
