//! Data-plane TLS through real OSDs on loopback: a client with the cluster's certificate
//! writes and reads, and the OSDs replicate to each other inside TLS; a plaintext client, a
//! client whose certificate comes from another CA, and a TLS client of a plaintext OSD are
//! refused at once with an error saying why.

// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use basalt_auth::{registry, ClusterSecret, Credentials, DataTls, Keyring};
use basalt_client::{Cluster, Connection};
use basalt_meta::EmbeddedMeta;
use basalt_osd::{Osd, OsdHandle};
use basalt_proto::ObjectId;
use bytes::Bytes;
use common::{base_map, osd_config};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Longest any refused connection may take to fail: refusals are immediate, never hangs.
const REFUSAL_BOUND: Duration = Duration::from_secs(10);

/// A CA and a certificate for `basalt-data` signed by it, in `dir`, made with openssl(1).
fn make_tls_dir(dir: &Path) -> Arc<DataTls> {
    std::fs::create_dir_all(dir).unwrap();
    let sh = |script: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {out:?}");
    };
    sh(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -keyout ca-key.pem -out ca-cert.pem -subj /CN=ca 2>/dev/null",
    );
    sh(
        "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout key.pem -out c.csr -subj /CN=basalt-data 2>/dev/null",
    );
    sh("printf 'subjectAltName=DNS:basalt-data\\nextendedKeyUsage=serverAuth,clientAuth\\n' > c.ext");
    sh(
        "openssl x509 -req -in c.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial \
        -days 2 -extfile c.ext -out cert.pem 2>/dev/null",
    );
    DataTls::load(dir).unwrap()
}

struct Tls {
    dir: tempfile::TempDir,
    meta: Arc<EmbeddedMeta>,
    secret: ClusterSecret,
    osds: Vec<OsdHandle>,
    maps: tokio::sync::watch::Sender<Arc<basalt_placement::ClusterMap>>,
}

/// Three OSDs with authentication, inside TLS with `tls` (None: plaintext).
async fn start(tls: Option<Arc<DataTls>>) -> Tls {
    let dir = tempfile::tempdir().unwrap();
    let mut map = base_map();
    let meta = Arc::new(EmbeddedMeta::in_memory());
    let secret = ClusterSecret::generate().unwrap();
    registry::init_cluster(meta.as_ref(), &secret)
        .await
        .unwrap();
    let authority = Arc::new(basalt_auth::Authority::new(secret.clone(), meta.clone()));
    let (tx, rx) = tokio::sync::watch::channel(Arc::new(map.clone()));
    let mut osds = Vec::new();
    for id in 0..3u32 {
        let mut config = osd_config(dir.path(), id, 256 << 20);
        config.auth = Some(authority.clone());
        if let Some(tls) = &tls {
            config.network = basalt_osd::Network::Tls(tls.clone());
        }
        let h = Osd::start(config, rx.clone(), meta.clone()).await.unwrap();
        let info = map.osds.get_mut(&id).unwrap();
        info.addr = h.addr.to_string();
        info.incarnation = h.osd.incarnation;
        osds.push(h);
    }
    map.recompute();
    tx.send_replace(Arc::new(map.clone()));
    Tls {
        dir,
        meta,
        secret,
        osds,
        maps: tx,
    }
}

impl Tls {
    fn admin_creds(&self, tls: Option<Arc<DataTls>>) -> Credentials {
        Keyring::Cluster(self.secret.clone())
            .client_credentials()
            .with_tls(tls)
    }

    fn client(&self, tls: Option<Arc<DataTls>>) -> Arc<Cluster> {
        Cluster::new_as(
            self.meta.clone(),
            self.maps.subscribe(),
            Some(self.admin_creds(tls)),
        )
    }

    fn refused(&self, label: &str) -> u64 {
        let i = basalt_osd::auth::REFUSAL_LABELS
            .iter()
            .position(|l| *l == label)
            .unwrap();
        self.osds
            .iter()
            .map(|h| h.osd.auth_counters.refused[i].load(Ordering::Relaxed))
            .sum()
    }

    /// Waits (bounded) until the OSDs counted `at_least` refusals labelled `label`: an OSD
    /// counts a refusal after answering it, so the client may see it first.
    async fn refused_at_least(&self, label: &str, at_least: u64) -> u64 {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        // Bound: the deadline.
        loop {
            let n = self.refused(label);
            if n >= at_least || std::time::Instant::now() > deadline {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Connect as the cluster's admin with `creds`, bounded; the error it must fail with.
async fn refused_with(addr: &str, creds: &Credentials) -> String {
    let r = tokio::time::timeout(REFUSAL_BOUND, Connection::connect_as(addr, Some(creds)))
        .await
        .expect("a refusal, not a hang");
    match r {
        Ok(_) => panic!("connected to {addr}"),
        Err(e) => {
            assert!(
                matches!(e, basalt_client::ClientError::Auth { .. }),
                "a configuration error is not retried: {e:?}"
            );
            e.to_string()
        }
    }
}

/// Goal: I/O inside TLS works end to end (client → OSD and the OSDs' replication), and
/// every peer without the cluster's TLS is refused at once with a reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_osds_serve_tls_clients_and_refuse_the_rest() {
    let scratch = tempfile::tempdir().unwrap();
    let tls = make_tls_dir(&scratch.path().join("cluster"));
    let c = start(Some(tls.clone())).await;
    let admin = c.client(Some(tls.clone()));
    let info = admin.create_volume("v", 1 << 20, 1).await.unwrap();
    let v = admin.open_volume("v").await.unwrap();
    v.write(8192, Bytes::from(vec![7u8; 8192]), true)
        .await
        .unwrap();
    assert_eq!(v.read(8192, 8192).await.unwrap(), vec![7u8; 8192]);
    let obj = ObjectId::new(info.id, 0);
    for h in &c.osds {
        let mut buf = vec![0u8; 8192];
        h.osd.store.read(obj, 8192, &mut buf).unwrap();
        assert_eq!(buf, vec![7u8; 8192], "osd.{} holds the replica", h.osd.id);
    }
    let addr = admin.map().osds[&0].addr.clone();

    // Plaintext, with the right key: told that TLS is required.
    let e = refused_with(&addr, &c.admin_creds(None)).await;
    assert!(e.contains("requires data-plane TLS"), "{e}");
    assert_eq!(c.refused_at_least("plaintext", 1).await, 1);

    // A certificate of another CA: the TLS handshake fails, on both sides.
    let other = make_tls_dir(&scratch.path().join("other"));
    let e = refused_with(&addr, &c.admin_creds(Some(other))).await;
    assert!(e.contains("data-plane TLS with"), "{e}");
    assert!(
        c.refused_at_least("tls", 1).await >= 1,
        "the OSD counts the failed handshake"
    );
    assert!(c.dir.path().exists());
}

/// Goal: a TLS client of a plaintext OSD fails at once with a reason, never hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_of_a_plaintext_osd_is_told_so() {
    let scratch = tempfile::tempdir().unwrap();
    let tls = make_tls_dir(&scratch.path().join("cluster"));
    let c = start(None).await;
    let addr = c.osds[0].addr.to_string();
    let e = refused_with(&addr, &c.admin_creds(Some(tls))).await;
    assert!(e.contains("does the OSD run with data-plane TLS"), "{e}");
}
