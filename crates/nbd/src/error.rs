//! Why a connection ended other than by the client's clean disconnect.

use thiserror::Error;

use crate::export::DeviceError;

/// The ways a connection can end badly. Client protocol violations end the connection (the
/// protocol allows a hard disconnect for them); none of them affects other connections.
#[derive(Debug, Error)]
pub enum NbdError {
    /// The socket failed or the client went away mid-message.
    #[error("connection i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The client set handshake flags the server did not offer (the protocol says drop it).
    #[error("client sent unknown handshake flags {flags:#x}")]
    ClientFlags {
        /// The flags received.
        flags: u32,
    },
    /// An option header did not start with `IHAVEOPT`.
    #[error("bad option magic {magic:#x}")]
    OptionMagic {
        /// The magic received.
        magic: u64,
    },
    /// An option announced more data than the server will read or skip.
    #[error("option {code} announces {length} bytes, more than the server accepts")]
    OptionTooLarge {
        /// Option code.
        code: u32,
        /// Announced data length.
        length: u32,
    },
    /// The client did not finish negotiating in time.
    #[error("handshake not finished within {limit:?}")]
    HandshakeTimeout {
        /// The bound.
        limit: std::time::Duration,
    },
    /// The client kept negotiating past the per-connection option bound.
    #[error("more than {limit} options on one connection")]
    TooManyOptions {
        /// The bound.
        limit: u32,
    },
    /// `OPT_EXPORT_NAME` named an export that cannot be served (no error reply exists for it).
    #[error("export {name:?} cannot be served: {reason}")]
    ExportRefused {
        /// Requested name (possibly cut).
        name: String,
        /// Why.
        reason: String,
    },
    /// Opening an export failed.
    #[error("opening export {name:?}: {source}")]
    Open {
        /// Requested name.
        name: String,
        /// The catalogue's error.
        source: DeviceError,
    },
    /// The TLS handshake after `OPT_STARTTLS` failed (bad certificate, unknown PSK user,
    /// wrong key...). The session ends: it is too late to continue without TLS.
    #[error("TLS handshake failed: {reason}")]
    TlsHandshake {
        /// The TLS library's reason.
        reason: String,
    },
    /// A plaintext client asked to enter transmission with `OPT_EXPORT_NAME` on a server
    /// that requires TLS (that option has no error reply).
    #[error("export {name:?} requested without TLS on a server that requires it")]
    TlsRequired {
        /// Requested name (possibly cut).
        name: String,
    },
    /// A request header did not start with `NBD_REQUEST_MAGIC`.
    #[error("bad request magic {magic:#x}")]
    RequestMagic {
        /// The magic received.
        magic: u32,
    },
    /// A write announced a payload too large to read; the stream cannot be resynchronised.
    #[error("write of {length} bytes exceeds the {limit}-byte limit")]
    WriteTooLarge {
        /// Announced payload length.
        length: u32,
        /// The limit.
        limit: u32,
    },
}
