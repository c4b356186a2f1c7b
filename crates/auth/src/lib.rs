//! Data-plane authentication (docs/design.md, "Data-plane authentication").
//!
//! A cluster has one secret; every entity's key is derived from it and the entity's
//! generation, so the metadata store holds no key. Every TCP connection to an OSD runs the
//! mutual challenge–response of [`handshake`] before its first frame; the server learns the
//! entity's [`Caps`] and refuses requests outside them.

pub mod caps;
pub mod error;
pub mod handshake;
pub mod keyring;
pub mod keys;
pub mod registry;
pub mod tls;

pub use caps::Caps;
pub use error::AuthError;
pub use handshake::{accept, connect, KeyLookup, Refusal, Session, HANDSHAKE_TIMEOUT};
pub use keyring::{Credentials, Keyring};
pub use keys::{ClusterSecret, EntityName, Key};
pub use registry::{Authority, EntityRecord};
pub use tls::DataTls;
