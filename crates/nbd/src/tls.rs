//! NBD over TLS: the server's credentials and the upgrade of a connection after
//! `OPT_STARTTLS`. x509 certificates go through rustls (ring provider); pre-shared keys
//! through the system's OpenSSL, because rustls has no external PSKs.
//!
//! Credentials are read and checked once, at startup ([`TlsConfig::x509_dir`],
//! [`TlsConfig::psk_file`]): a missing file, bad PEM, a key that does not match its
//! certificate or a malformed key file is an error there, never a failed connection later.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use openssl::ssl::{Ssl, SslContext, SslContextBuilder, SslMethod, SslVersion};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::NbdError;
use crate::option::TlsMode;

/// CA certificate file of a credentials directory (qemu's `tls-creds-x509` layout).
pub const CA_CERT_FILE: &str = "ca-cert.pem";
/// Server certificate (chain) file of a credentials directory.
pub const SERVER_CERT_FILE: &str = "server-cert.pem";
/// Server private key file of a credentials directory.
pub const SERVER_KEY_FILE: &str = "server-key.pem";
/// Longest pre-shared key accepted, in bytes (OpenSSL's own limit is 512).
pub const MAX_PSK_BYTES: usize = 256;
/// Ciphertext read buffer under a TLS session. rustls reads the socket 4 KiB at a time
/// and OpenSSL a record header, then its body: without a buffer below them a 4 KiB write
/// costs several syscalls. One read here takes many pipelined records at once.
const CIPHERTEXT_BUFFER_BYTES: usize = 128 << 10;
/// Longest PSK identity (user name) accepted, in bytes (TLS allows 2^16 - 1).
pub const MAX_PSK_IDENTITY_BYTES: usize = 1024;

/// Why TLS credentials could not be loaded.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A credentials file is missing or unreadable.
    #[error("read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// A PEM file holds nothing usable.
    #[error("{path}: {reason}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the certificates (e.g. the key does not match the certificate).
    #[error("x509 credentials in {dir}: {reason}")]
    X509 {
        /// The credentials directory.
        dir: PathBuf,
        /// rustls' reason.
        reason: String,
    },
    /// A line of a PSK keys file is malformed.
    #[error("{path} line {line}: {reason} (expected USER:HEXKEY)")]
    PskLine {
        /// The keys file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A PSK keys file holds no key.
    #[error("{path}: no USER:HEXKEY line")]
    PskEmpty {
        /// The keys file.
        path: PathBuf,
    },
    /// OpenSSL could not set up the PSK context.
    #[error("OpenSSL PSK setup: {0}")]
    OpenSsl(#[from] openssl::error::ErrorStack),
}

/// A byte stream a TLS session runs over, or the session itself.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> Stream for T {}

/// A connection upgraded to TLS (either implementation).
pub(crate) type TlsStream = Box<dyn Stream>;

/// The credentials a server offers and whether it insists on TLS.
pub struct TlsConfig {
    creds: Creds,
    required: bool,
}

enum Creds {
    X509 {
        acceptor: tokio_rustls::TlsAcceptor,
        dir: PathBuf,
        verify_peer: bool,
    },
    Psk {
        context: SslContext,
        file: PathBuf,
        users: usize,
    },
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl TlsConfig {
    /// x509 credentials from a directory laid out as qemu's `tls-creds-x509`:
    /// `server-cert.pem` (the certificate, then any intermediates), `server-key.pem`, and
    /// with `verify_peer` also `ca-cert.pem`, against which client certificates are then
    /// required and checked. TLS 1.2 and 1.3.
    pub fn x509_dir(dir: &Path, verify_peer: bool) -> Result<Self, TlsError> {
        let cert_path = dir.join(SERVER_CERT_FILE);
        let key_path = dir.join(SERVER_KEY_FILE);
        let chain = read_certs(&cert_path)?;
        let key_pem = read(&key_path)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Pem {
            path: key_path.clone(),
            reason: format!("no private key: {e}"),
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let x509 = |e: rustls::Error| TlsError::X509 {
            dir: dir.to_owned(),
            reason: e.to_string(),
        };
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(x509)?;
        let builder = if verify_peer {
            let ca_path = dir.join(CA_CERT_FILE);
            let mut roots = rustls::RootCertStore::empty();
            for cert in read_certs(&ca_path)? {
                roots.add(cert).map_err(|e| TlsError::Pem {
                    path: ca_path.clone(),
                    reason: format!("not a usable CA certificate: {e}"),
                })?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|e| TlsError::X509 {
                        dir: dir.to_owned(),
                        reason: format!("client verification: {e}"),
                    })?;
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        // Checks that the key belongs to the certificate.
        let config = builder.with_single_cert(chain, key).map_err(x509)?;
        Ok(Self {
            creds: Creds::X509 {
                acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
                dir: dir.to_owned(),
                verify_peer,
            },
            required: false,
        })
    }

    /// Pre-shared keys from a keys file as qemu's `tls-creds-psk` and nbdkit read it: one
    /// `USER:HEXKEY` per line. The client names its user as the PSK identity. TLS 1.2 PSK
    /// cipher suites and TLS 1.3 external PSKs.
    pub fn psk_file(path: &Path) -> Result<Self, TlsError> {
        let text = read(path)?;
        let keys = parse_psk_keys(path, &text)?;
        let users = keys.len();
        let mut b = SslContextBuilder::new(SslMethod::tls_server())?;
        b.set_min_proto_version(Some(SslVersion::TLS1_2))?;
        // TLS 1.2: PSK suites only (no certificate to offer); ECDHE first for forward secrecy.
        b.set_cipher_list(
            "ECDHE-PSK-CHACHA20-POLY1305:ECDHE-PSK-AES256-CBC-SHA384:\
             ECDHE-PSK-AES128-CBC-SHA256:PSK-AES256-GCM-SHA384:PSK-AES128-GCM-SHA256:\
             PSK-CHACHA20-POLY1305",
        )?;
        // No session tickets: every connection proves the key again.
        b.set_num_tickets(0)?;
        b.set_psk_server_callback(move |_ssl, identity, buf| {
            // An unknown identity gets no key (0 bytes): the handshake fails.
            let key = identity
                .and_then(|id| std::str::from_utf8(id).ok())
                .and_then(|user| keys.get(user));
            match key {
                Some(key) if key.len() <= buf.len() => {
                    buf[..key.len()].copy_from_slice(key);
                    Ok(key.len())
                }
                _ => Ok(0),
            }
        });
        Ok(Self {
            creds: Creds::Psk {
                context: b.build(),
                file: path.to_owned(),
                users,
            },
            required: false,
        })
    }

    /// Refuse plaintext clients (FORCEDTLS) when `required`.
    pub fn required(mut self, required: bool) -> Self {
        self.required = required;
        self
    }

    /// The protocol mode these settings give.
    pub fn mode(&self) -> TlsMode {
        if self.required {
            TlsMode::Required
        } else {
            TlsMode::Offered
        }
    }

    /// One line for banners and logs, e.g. "x509 (certificates in /etc/basalt/tls), TLS
    /// required".
    pub fn describe(&self) -> String {
        let creds = match &self.creds {
            Creds::X509 {
                dir, verify_peer, ..
            } => {
                let peer = if *verify_peer {
                    ", client certificates required"
                } else {
                    ""
                };
                format!("x509 (certificates in {}{peer})", dir.display())
            }
            Creds::Psk { file, users, .. } => {
                format!("PSK ({users} user(s) in {})", file.display())
            }
        };
        let mode = if self.required {
            "TLS required"
        } else {
            "TLS optional"
        };
        format!("{creds}, {mode}")
    }

    /// Run the server side of the TLS handshake on `stream` (right after `REP_ACK`).
    pub(crate) async fn accept<S>(&self, stream: S) -> Result<TlsStream, NbdError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static,
    {
        let failed = |reason: String| NbdError::TlsHandshake { reason };
        // Writes pass straight through the BufReader to the socket.
        let stream = tokio::io::BufReader::with_capacity(CIPHERTEXT_BUFFER_BYTES, stream);
        match &self.creds {
            Creds::X509 { acceptor, .. } => {
                let s = acceptor
                    .accept(stream)
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                let session = s.get_ref().1;
                tracing::debug!(
                    version = ?session.protocol_version(),
                    suite = ?session.negotiated_cipher_suite().map(|c| c.suite()),
                    "nbd TLS session (x509)"
                );
                Ok(Box::new(s))
            }
            Creds::Psk { context, .. } => {
                let ssl = Ssl::new(context).map_err(|e| failed(e.to_string()))?;
                let mut s = tokio_openssl::SslStream::new(ssl, stream)
                    .map_err(|e| failed(e.to_string()))?;
                Pin::new(&mut s)
                    .accept()
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                tracing::debug!(
                    version = s.ssl().version_str(),
                    suite = s.ssl().current_cipher().map_or("none", |c| c.name()),
                    "nbd TLS session (PSK)"
                );
                Ok(Box::new(s))
            }
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Every certificate of a PEM file; at least one.
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_owned(),
            reason: format!("bad PEM: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_owned(),
            reason: "no CERTIFICATE block".into(),
        });
    }
    Ok(certs)
}

/// Parse `USER:HEXKEY` lines (blank lines are skipped); every user once.
pub fn parse_psk_keys(path: &Path, text: &[u8]) -> Result<BTreeMap<String, Vec<u8>>, TlsError> {
    let bad = |line: usize, reason: &str| TlsError::PskLine {
        path: path.to_owned(),
        line,
        reason: reason.into(),
    };
    let text = std::str::from_utf8(text).map_err(|_| bad(0, "not UTF-8 text"))?;
    let mut keys = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let (user, hex) = line.split_once(':').ok_or_else(|| bad(n, "no ':'"))?;
        if user.is_empty() || user.len() > MAX_PSK_IDENTITY_BYTES {
            return Err(bad(n, "empty or overlong user name"));
        }
        let key = decode_hex(hex.trim()).ok_or_else(|| bad(n, "key is not hexadecimal"))?;
        if key.is_empty() || key.len() > MAX_PSK_BYTES {
            return Err(bad(n, "key is empty or longer than 256 bytes"));
        }
        if keys.insert(user.to_owned(), key).is_some() {
            return Err(bad(n, "user listed twice"));
        }
    }
    if keys.is_empty() {
        return Err(TlsError::PskEmpty {
            path: path.to_owned(),
        });
    }
    Ok(keys)
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16);
    s.as_bytes()
        .chunks(2)
        .map(|p| Some((digit(p[0])? * 16 + digit(p[1])?) as u8))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psk_keys_file_is_checked_line_by_line() {
        // Goal: USER:HEXKEY lines decode; malformed lines name their line and are refused.
        let p = Path::new("keys.psk");
        let keys = parse_psk_keys(p, b"alice:00ff10\n\nbob:ABCD\r\n").unwrap();
        assert_eq!(keys["alice"], vec![0x00, 0xff, 0x10]);
        assert_eq!(keys["bob"], vec![0xab, 0xcd]);
        for (text, line) in [
            (&b"alice"[..], 1),
            (b"alice:0g", 1),
            (b"alice:abc", 1),
            (b"alice:", 1),
            (b":abcd", 1),
            (b"a:00\na:11", 2),
        ] {
            match parse_psk_keys(p, text) {
                Err(TlsError::PskLine { line: l, .. }) => assert_eq!(l, line, "{text:?}"),
                other => panic!("{text:?}: expected a line error, got {other:?}"),
            }
        }
        assert!(matches!(
            parse_psk_keys(p, b"\n\n"),
            Err(TlsError::PskEmpty { .. })
        ));
    }

    #[test]
    fn x509_dir_errors_name_the_file() {
        // Goal: a missing or non-PEM certificate is a startup error naming the file.
        let dir = tempfile::tempdir().unwrap();
        let err = TlsConfig::x509_dir(dir.path(), false).unwrap_err();
        assert!(err.to_string().contains(SERVER_CERT_FILE), "{err}");
        std::fs::write(dir.path().join(SERVER_CERT_FILE), "not pem").unwrap();
        std::fs::write(dir.path().join(SERVER_KEY_FILE), "not pem").unwrap();
        let err = TlsConfig::x509_dir(dir.path(), false).unwrap_err();
        assert!(err.to_string().contains("no CERTIFICATE"), "{err}");
    }
}
