//! Authentication failures.

use thiserror::Error;

/// Why a keyring, a record or a handshake failed.
#[derive(Debug, Error)]
pub enum AuthError {
    /// Reading or writing a keyring file failed.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        source: std::io::Error,
    },
    /// A keyring file does not parse.
    #[error("keyring {path}, line {line}: {reason}")]
    BadKeyring {
        path: String,
        line: usize,
        reason: String,
    },
    /// A keyring that group or others can read: its secret may have leaked.
    #[error("keyring {path} has mode {mode:o}: make it readable by its owner only (chmod 600)")]
    OpenPermissions { path: String, mode: u32 },
    /// A keyring with neither a cluster secret nor an entity key.
    #[error("keyring {path} holds no [cluster] secret and no entity key")]
    EmptyKeyring { path: String },
    /// An entity name that is not `osd.N`, `client.admin` or `client.NAME`.
    #[error("bad entity name {name:?}: {reason}")]
    BadEntity { name: String, reason: String },
    /// A capability list that does not parse.
    #[error("bad capabilities {caps:?}: expected data or admin")]
    BadCaps { caps: String },
    /// The operation needs the cluster secret, and the keyring holds only an entity key.
    #[error("this needs the cluster secret (an admin keyring); the keyring holds only the key of {entity}")]
    NeedsSecret { entity: String },
    /// The cluster has no verifier: `basalt cluster init` was never run on it.
    #[error("the cluster has no keyring yet: run `basalt cluster init --keyring FILE` first")]
    NotInitialised,
    /// The cluster already has a verifier.
    #[error("the cluster already has a keyring (made by an earlier `basalt cluster init`)")]
    AlreadyInitialised,
    /// The keyring's secret is not this cluster's.
    #[error("the keyring's cluster secret does not belong to this cluster")]
    WrongCluster,
    /// `auth add` of an entity that exists.
    #[error("entity {name} exists (remove it first to make a new key)")]
    EntityExists { name: String },
    /// `auth rm` of an entity that does not exist, or a built-in one.
    #[error("no entity {name}")]
    NoSuchEntity { name: String },
    /// A stored entity record does not parse.
    #[error("entity record {key} is corrupt: {reason}")]
    CorruptRecord { key: String, reason: String },
    /// The metadata store failed.
    #[error(transparent)]
    Meta(#[from] basalt_meta::MetaError),
    /// The system's random source failed.
    #[error("no randomness from the system: {0}")]
    Random(String),
    /// The server refused the handshake.
    #[error("{addr} refused entity {entity}: unknown, revoked or wrong key")]
    Denied { addr: String, entity: String },
    /// The server's proof did not verify: it does not know the key.
    #[error("{addr} could not prove it knows the key of {entity}: not an OSD of this cluster")]
    ServerProof { addr: String, entity: String },
    /// Data-plane TLS credentials that cannot be used.
    #[error("data-plane TLS {path}: {reason}")]
    Tls { path: String, reason: String },
    /// The TLS session with an OSD could not be set up (wrong CA, a plaintext OSD, ...).
    #[error("data-plane TLS with {addr} failed: {reason}")]
    TlsHandshake { addr: String, reason: String },
    /// The OSD requires data-plane TLS and this client spoke plaintext.
    #[error("{addr} requires data-plane TLS: give the cluster's TLS directory (--data-tls DIR or BASALT_DATA_TLS)")]
    TlsRequired { addr: String },
    /// The peer broke the handshake protocol or the connection.
    #[error("handshake with {addr}: {reason}")]
    Handshake { addr: String, reason: String },
}
