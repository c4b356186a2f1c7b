//! Basalt's NVMe over TCP target: serves every volume of an [`Exports`] catalogue as an
//! NVMe subsystem (`nqn.2026-01.io.basalt:VOLUME`, one namespace) to the Linux kernel's
//! NVMe/TCP initiator, with a discovery controller listing them.
//!
//! Coverage (NVMe/TCP 1.0, NVMe base 1.3 as the Linux initiator uses it): ICReq/ICResp,
//! header and data digests, in-capsule data and R2T/H2CData, Fabrics Connect (admin and I/O
//! queues, dynamic controller ids), Property Get/Set, Identify, Get/Set Features, Get Log
//! Page, Keep Alive, Asynchronous Event Request (namespace-changed notice on resize); NVM
//! Read, Write, Flush, Write Zeroes, Dataset Management. Durability is NBD's: FUA and Flush
//! complete once durable (docs/design.md).
//!
//! Layout: [`pdu`] the transport codec · [`command`] SQE/CQE and status codes ·
//! [`identify`] the data structures Identify and the logs return · `controller` admin
//! commands and controller state · `io` NVM commands · `queue` one connection's reader and
//! writer · [`target`] listeners, the controller registry and Connect.
//!
//! [`Exports`]: basalt_nbd::Exports

#![warn(missing_docs)]

pub mod command;
mod controller;
pub mod error;
pub mod identify;
mod io;
pub mod pdu;
mod queue;
pub mod target;

pub use error::NvmfError;
pub use identify::{volume_nqn, DISCOVERY_NQN};
pub use queue::MAX_H2C_DATA_BYTES;
pub use target::{Target, TargetConfig};
