//! NBD over TLS in process: a raw client upgrades with `OPT_STARTTLS` (rustls for x509,
//! OpenSSL for PSK), haggles again inside TLS, and writes and reads through the encrypted
//! transmission phase; a second STARTTLS inside TLS is refused; a wrong PSK ends the
//! session. The fixtures in tests/data/tls are a test CA and a `localhost` certificate.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use basalt_nbd::request::Request;
use basalt_nbd::wire::*;
use basalt_nbd::{ExportMap, MemDevice, NbdError, Server, ServerConfig, TlsConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

/// Bound on one whole test session.
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls")
}

fn option(code: u32, data: &[u8]) -> Vec<u8> {
    let mut b = IHAVEOPT.to_be_bytes().to_vec();
    b.extend_from_slice(&code.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// One option reply: (option, reply type), its data skipped.
async fn reply<S: AsyncRead + Unpin>(s: &mut S) -> (u32, u32) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).await.unwrap();
    assert_eq!(
        u64::from_be_bytes(h[0..8].try_into().unwrap()),
        OPTION_REPLY_MAGIC
    );
    let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
    let mut data = vec![0u8; len as usize];
    s.read_exact(&mut data).await.unwrap();
    (
        u32::from_be_bytes(h[8..12].try_into().unwrap()),
        u32::from_be_bytes(h[12..16].try_into().unwrap()),
    )
}

/// A server with TLS `tls` and one 1 MiB export "m" (the default), serving one end of a
/// pipe; returns the other end and the session's task.
fn serve(tls: TlsConfig) -> (DuplexStream, tokio::task::JoinHandle<Result<(), NbdError>>) {
    let exports = Arc::new(ExportMap::new());
    exports.insert("m", "", Arc::new(MemDevice::new(1 << 20)));
    exports.set_default(Some("m".into()));
    let config = ServerConfig {
        tls: Some(Arc::new(tls)),
        ..ServerConfig::default()
    };
    let server = Server::with_config(exports, config);
    let (client, conn) = tokio::io::duplex(1 << 16);
    let task = tokio::spawn(async move { server.serve_connection(conn).await });
    (client, task)
}

/// Greeting, client flags, STARTTLS (acknowledged).
async fn start_tls(c: &mut DuplexStream) {
    let mut greeting = [0u8; 18];
    c.read_exact(&mut greeting).await.unwrap();
    c.write_all(&3u32.to_be_bytes()).await.unwrap();
    c.write_all(&option(OPT_STARTTLS, &[])).await.unwrap();
    assert_eq!(reply(c).await, (OPT_STARTTLS, REP_ACK));
}

/// Inside TLS: STARTTLS again is ERR_INVALID; EXPORT_NAME enters transmission; a 4 KiB
/// write is read back; DISC ends the session cleanly.
async fn session<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
    s.write_all(&option(OPT_STARTTLS, &[])).await.unwrap();
    assert_eq!(reply(s).await, (OPT_STARTTLS, REP_ERR_INVALID));
    s.write_all(&option(OPT_EXPORT_NAME, b"")).await.unwrap();
    assert_eq!(s.read_u64().await.unwrap(), 1 << 20);
    s.read_u16().await.unwrap();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let req = |kind, handle| Request {
        flags: 0,
        kind,
        handle,
        offset: 8192,
        length: if kind == CMD_DISC { 0 } else { 4096 },
    };
    s.write_all(&req(CMD_WRITE, 1).encode()).await.unwrap();
    s.write_all(&data).await.unwrap();
    s.write_all(&req(CMD_READ, 2).encode()).await.unwrap();
    s.flush().await.unwrap();
    let mut simple = [0u8; 16];
    s.read_exact(&mut simple).await.unwrap();
    assert_eq!(&simple[4..8], &[0; 4], "write failed");
    s.read_exact(&mut simple).await.unwrap();
    assert_eq!(&simple[4..8], &[0; 4], "read failed");
    assert_eq!(u64::from_be_bytes(simple[8..16].try_into().unwrap()), 2);
    let mut back = vec![0u8; 4096];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(back, data);
    s.write_all(&req(CMD_DISC, 3).encode()).await.unwrap();
    s.flush().await.unwrap();
    let mut rest = Vec::new();
    // The server ends with close_notify: a clean end of stream, nothing more.
    let _ = s.read_to_end(&mut rest).await;
    assert!(rest.is_empty());
}

#[tokio::test]
async fn x509_session_upgrades_haggles_again_and_transmits() {
    // Goal: STARTTLS, a rustls client that trusts the test CA, a refused second STARTTLS,
    // then a write read back through the TLS transmission phase, in FORCEDTLS mode.
    let tls = TlsConfig::x509_dir(&fixtures(), false)
        .unwrap()
        .required(true);
    let (mut c, task) = serve(tls);
    tokio::time::timeout(SESSION_TIMEOUT, async {
        start_tls(&mut c).await;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(fixtures().join("ca-cert.pem")).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let name = ServerName::try_from("localhost").unwrap();
        let mut s = connector.connect(name, c).await.unwrap();
        session(&mut s).await;
    })
    .await
    .unwrap();
    task.await.unwrap().unwrap();
}

/// An OpenSSL PSK client of `user` with `key` over the pipe, after STARTTLS.
async fn psk_client(
    c: DuplexStream,
    user: &'static str,
    key: Vec<u8>,
) -> Result<tokio_openssl::SslStream<DuplexStream>, openssl::ssl::Error> {
    use openssl::ssl::{SslContext, SslMethod};
    let mut b = SslContext::builder(SslMethod::tls_client()).unwrap();
    b.set_cipher_list("ECDHE-PSK-CHACHA20-POLY1305:PSK-AES128-GCM-SHA256")
        .unwrap();
    b.set_psk_client_callback(move |_ssl, _hint, identity, psk| {
        identity[..user.len()].copy_from_slice(user.as_bytes());
        identity[user.len()] = 0;
        psk[..key.len()].copy_from_slice(&key);
        Ok(key.len())
    });
    let ssl = openssl::ssl::Ssl::new(&b.build()).unwrap();
    let mut s = tokio_openssl::SslStream::new(ssl, c).unwrap();
    Pin::new(&mut s).connect().await?;
    Ok(s)
}

#[tokio::test]
async fn psk_session_transmits_and_a_wrong_key_is_refused() {
    // Goal: a PSK client with the right key of its user completes a session through TLS;
    // with a wrong key the handshake fails on both sides and no option is served.
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.psk");
    std::fs::write(&keys, "alice:000102030405060708090a0b0c0d0e0f\n").unwrap();
    let key: Vec<u8> = (0..16).collect();

    let (mut c, task) = serve(TlsConfig::psk_file(&keys).unwrap().required(true));
    tokio::time::timeout(SESSION_TIMEOUT, async {
        start_tls(&mut c).await;
        let mut s = psk_client(c, "alice", key.clone()).await.unwrap();
        session(&mut s).await;
    })
    .await
    .unwrap();
    task.await.unwrap().unwrap();

    let (mut c, task) = serve(TlsConfig::psk_file(&keys).unwrap().required(true));
    let client = tokio::time::timeout(SESSION_TIMEOUT, async {
        start_tls(&mut c).await;
        psk_client(c, "alice", vec![9; 16]).await.err()
    })
    .await
    .unwrap();
    assert!(
        client.is_some(),
        "the client completed a handshake with a wrong key"
    );
    let server = tokio::time::timeout(SESSION_TIMEOUT, task)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(server, Err(NbdError::TlsHandshake { .. })),
        "{server:?}"
    );
}
