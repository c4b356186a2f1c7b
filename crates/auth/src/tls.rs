//! Data-plane TLS (docs/design.md, "Data-plane TLS"): the credentials every OSD, gateway
//! and admin tool of a cluster loads from one directory, and the TLS session the
//! authentication handshake then runs inside.
//!
//! Every party presents its certificate and requires the other's to chain to the cluster
//! CA (mutual TLS). OSDs are dialled by IP, so the server name checked is the fixed
//! [`SERVER_NAME`]; which OSD or client is at the other end is proven by the HMAC
//! handshake inside the session, not by the certificate.

use crate::AuthError;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// The name every data-plane certificate carries (subjectAltName DNS) and clients check.
pub const SERVER_NAME: &str = "basalt-data";
/// The cluster CA's certificate in a data-TLS directory.
pub const CA_CERT_FILE: &str = "ca-cert.pem";
/// This party's certificate (then any intermediates).
pub const CERT_FILE: &str = "cert.pem";
/// This party's private key (PKCS#8, PKCS#1 or SEC1).
pub const KEY_FILE: &str = "key.pem";
/// First byte of a TLS handshake record: how a TLS OSD tells a plaintext peer apart.
pub const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// A TLS server session on a TCP connection.
pub type ServerStream = tokio_rustls::server::TlsStream<TcpStream>;
/// A TLS client session on a TCP connection.
pub type ClientStream = tokio_rustls::client::TlsStream<TcpStream>;

/// Loaded and checked data-plane TLS credentials: both ends of a connection.
pub struct DataTls {
    dir: PathBuf,
    acceptor: tokio_rustls::TlsAcceptor,
    connector: tokio_rustls::TlsConnector,
}

impl fmt::Debug for DataTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DataTls({})", self.dir.display())
    }
}

impl DataTls {
    /// Load `ca-cert.pem`, `cert.pem` and `key.pem` from `dir`; a missing file, bad PEM or
    /// a key that is not the certificate's is an error naming the culprit.
    pub fn load(dir: &Path) -> Result<Arc<DataTls>, AuthError> {
        let bad = |path: &Path, reason: String| AuthError::Tls {
            path: path.display().to_string(),
            reason,
        };
        let ca_path = dir.join(CA_CERT_FILE);
        let mut roots = rustls::RootCertStore::empty();
        for cert in read_certs(&ca_path)? {
            roots
                .add(cert)
                .map_err(|e| bad(&ca_path, format!("not a usable CA certificate: {e}")))?;
        }
        let roots = Arc::new(roots);
        let cert_path = dir.join(CERT_FILE);
        let chain = read_certs(&cert_path)?;
        let key_path = dir.join(KEY_FILE);
        let key_pem = read(&key_path)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| bad(&key_path, format!("no private key: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = |e: rustls::Error| bad(dir, e.to_string());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots.clone(),
            provider.clone(),
        )
        .build()
        .map_err(|e| bad(&ca_path, format!("client verification: {e}")))?;
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(config)?
            .with_client_cert_verifier(verifier)
            // Checks that the key belongs to the certificate.
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(config)?;
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(config)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(config)?;
        Ok(Arc::new(DataTls {
            dir: dir.to_owned(),
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            connector: tokio_rustls::TlsConnector::from(Arc::new(client)),
        }))
    }

    /// The directory the credentials came from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Run the server side of the TLS handshake (the caller bounds it in time).
    pub async fn accept(&self, tcp: TcpStream) -> std::io::Result<ServerStream> {
        self.acceptor.accept(tcp).await
    }

    /// Run the client side of the TLS handshake (the caller bounds it in time).
    pub async fn connect(&self, tcp: TcpStream) -> std::io::Result<ClientStream> {
        let name = ServerName::try_from(SERVER_NAME).expect("a valid DNS name");
        self.connector.connect(name, tcp).await
    }
}

fn read(path: &Path) -> Result<Vec<u8>, AuthError> {
    std::fs::read(path).map_err(|source| AuthError::Io {
        op: "read",
        path: path.display().to_string(),
        source,
    })
}

/// Every certificate of a PEM file; at least one.
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, AuthError> {
    let pem = read(path)?;
    let bad = |reason: String| AuthError::Tls {
        path: path.display().to_string(),
        reason,
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(bad("no CERTIFICATE block".into()));
    }
    Ok(certs)
}
