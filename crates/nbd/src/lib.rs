//! Basalt's NBD server: serves any [`BlockDevice`] named by an [`Exports`] catalogue to NBD
//! clients (qemu, libnbd tools, fio, the Linux driver) over TCP or unix sockets.
//!
//! Protocol coverage: fixed newstyle handshake with `OPT_GO`/`INFO`/`LIST`/`EXPORT_NAME`/
//! `ABORT`, structured replies, `base:allocation` metadata, READ/WRITE/FLUSH/TRIM/
//! WRITE_ZEROES/CACHE/BLOCK_STATUS/DISC with FUA, and `CAN_MULTI_CONN`. Requests on one
//! connection run concurrently and reply out of order. TLS through `OPT_STARTTLS` with x509
//! certificates or pre-shared keys, optional or required ([`tls`]).
//!
//! Layout: [`wire`] constants and limits · [`option`] and [`request`] pure decoders ·
//! [`reply`] frame encoding · `handshake` and `transmission`, the two protocol phases ·
//! [`server`] sockets and shutdown · [`tls`] credentials and the upgrade · [`export`] the storage interface and
//! [`conformance`] its test suite · [`mem`] an in-memory device · [`volumes`] the volumes,
//! snapshots and images of a Basalt cluster, through the client library.

#![warn(missing_docs)]

pub mod conformance;
pub mod error;
pub mod export;
mod handshake;
pub mod mem;
pub mod option;
pub mod reply;
pub mod request;
pub mod server;
pub mod tls;
mod transmission;
pub mod volumes;
pub mod wire;

pub use error::NbdError;
pub use export::{BlockDevice, DeviceError, ExportInfo, ExportMap, Exports, Extent};
pub use handshake::{check_client_flags, transmission_flags};
pub use mem::MemDevice;
pub use server::{Server, ServerConfig};
pub use tls::{TlsConfig, TlsError};
pub use transmission::{MAX_IN_FLIGHT_BYTES, MAX_IN_FLIGHT_REQUESTS};
pub use volumes::{VolumeDevice, VolumeExports};
