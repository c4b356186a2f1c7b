//! Data-plane authentication through real OSDs on loopback: a client without the key, with
//! a wrong key, or sending a frame before the handshake is refused and changes nothing; a
//! data client cannot remove volumes; a revoked key stops working without restarting OSDs;
//! OSDs replicate to each other under their own keys.

// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use basalt_auth::{registry, Caps, ClusterSecret, Credentials, EntityName, Key, Keyring};
use basalt_client::{Cluster, Connection};
use basalt_meta::EmbeddedMeta;
use basalt_osd::OsdHandle;
use basalt_placement::ClusterMap;
use basalt_proto::{Header, ObjectId, Opcode, Status};
use bytes::Bytes;
use common::{base_map, start_osds_with};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

struct Authed {
    _dir: tempfile::TempDir,
    meta: Arc<EmbeddedMeta>,
    secret: ClusterSecret,
    osds: Vec<OsdHandle>,
    maps: watch::Sender<Arc<ClusterMap>>,
}

async fn start() -> Authed {
    let dir = tempfile::tempdir().unwrap();
    let mut map = base_map();
    let meta = Arc::new(EmbeddedMeta::in_memory());
    let secret = ClusterSecret::generate().unwrap();
    registry::init_cluster(meta.as_ref(), &secret)
        .await
        .unwrap();
    let authority = Arc::new(basalt_auth::Authority::new(secret.clone(), meta.clone()));
    let (osds, maps) = start_osds_with(dir.path(), &mut map, &meta, Some(authority)).await;
    Authed {
        _dir: dir,
        meta,
        secret,
        osds,
        maps,
    }
}

impl Authed {
    fn client(&self, creds: Option<Credentials>) -> Arc<Cluster> {
        Cluster::new_as(self.meta.clone(), self.maps.subscribe(), creds)
    }

    fn admin(&self) -> Arc<Cluster> {
        self.client(Some(
            Keyring::Cluster(self.secret.clone()).client_credentials(),
        ))
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

    async fn add(&self, name: &str, caps: Caps) -> Credentials {
        let entity = EntityName::parse(name).unwrap();
        let key = registry::add_entity(self.meta.as_ref(), &self.secret, &entity, caps)
            .await
            .unwrap();
        Credentials {
            entity,
            key,
            tls: None,
        }
    }
}

/// Goal: a frame sent without a handshake, a wrong key, an unknown entity: each is refused
/// and counted, and nothing they sent is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_without_a_valid_key_are_refused_and_change_nothing() {
    let a = start().await;
    let admin = a.admin();
    let info = admin.create_volume("v", 1 << 20, 1).await.unwrap();
    let obj = ObjectId::new(info.id, 0);
    let addr = admin.map().osds[&0].addr.clone();

    // A WRITE frame straight away, as a client of a cluster without authentication sends.
    let raw = Connection::connect(&addr).await.unwrap();
    let mut h = Header::request(Opcode::Write, 1, obj);
    h.length = 4096;
    let r = raw.call(h, Bytes::from(vec![0xee; 4096])).await;
    assert!(
        r.is_err(),
        "a frame before the handshake got a reply: {r:?}"
    );
    assert!(raw.is_dead());

    let stranger = Credentials {
        entity: EntityName::parse("client.hv1").unwrap(),
        key: Key::random().unwrap(),
        tls: None,
    };
    let e = Connection::connect_as(&addr, Some(&stranger))
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("refused entity client.hv1"), "{e}");
    let added = a.add("client.hv2", Caps::DATA).await;
    let wrong = Credentials {
        entity: added.entity.clone(),
        key: Key::random().unwrap(),
        tls: None,
    };
    let e = Connection::connect_as(&addr, Some(&wrong))
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("refused entity client.hv2"), "{e}");

    // Nothing of the refused WRITE landed: the object reads as zeros on every OSD.
    let v = admin.open_volume("v").await.unwrap();
    assert_eq!(v.read(0, 4096).await.unwrap(), vec![0u8; 4096]);
    for h in &a.osds {
        let mut buf = vec![0u8; 4096];
        h.osd.store.read(obj, 0, &mut buf).unwrap();
        assert_eq!(buf, vec![0u8; 4096], "osd.{}", h.osd.id);
    }
    assert!(
        a.refused("malformed") >= 1,
        "the frame-first connection is counted"
    );
    // The OSD counts a refusal after sending it: the client may see it first.
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.refused("bad_proof") == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(a.refused("unknown_entity"), 1);
    assert_eq!(a.refused("bad_proof"), 1);
}

/// Goal: a data client does I/O, is denied PURGE (volume removal) and FENCE; OSDs replicate
/// each write to each other under their own keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_client_writes_but_cannot_remove() {
    let a = start().await;
    let admin = a.admin();
    let info = admin.create_volume("v", 1 << 20, 1).await.unwrap();
    let hv = a.client(Some(a.add("client.hv1", Caps::DATA).await));
    let v = hv.open_volume("v").await.unwrap();
    v.write(8192, Bytes::from(vec![7u8; 8192]), true)
        .await
        .unwrap();
    assert_eq!(v.read(8192, 8192).await.unwrap(), vec![7u8; 8192]);
    // Every replica holds it: OSD-to-OSD connections authenticated as osd.N.
    let obj = ObjectId::new(info.id, 0);
    for h in &a.osds {
        let mut buf = vec![0u8; 8192];
        h.osd.store.read(obj, 8192, &mut buf).unwrap();
        assert_eq!(buf, vec![7u8; 8192], "osd.{}", h.osd.id);
    }

    let addr = hv.map().osds[&0].addr.clone();
    let creds = a.add("client.hv2", Caps::DATA).await;
    let conn = Connection::connect_as(&addr, Some(&creds)).await.unwrap();
    for op in [Opcode::Purge, Opcode::Fence] {
        let r = conn
            .call(Header::request(op, 1, obj), Bytes::new())
            .await
            .unwrap();
        assert_eq!(r.header.status, Status::Denied, "{op:?}");
    }
    let denied: u64 = a
        .osds
        .iter()
        .map(|h| h.osd.auth_counters.denied_requests.load(Ordering::Relaxed))
        .sum();
    assert_eq!(denied, 2);
    let mut buf = vec![0u8; 8192];
    a.osds[0].osd.store.read(obj, 8192, &mut buf).unwrap();
    assert_eq!(buf, vec![7u8; 8192], "the denied PURGE removed nothing");
}

/// Goal: removing an entity closes its open connections and refuses new ones, with no OSD
/// restart; other clients go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_stops_working_without_restarting_osds() {
    let a = start().await;
    let admin = a.admin();
    admin.create_volume("v", 1 << 20, 1).await.unwrap();
    let creds = a.add("client.hv1", Caps::DATA).await;
    let addr = admin.map().osds[&1].addr.clone();
    let conn = Connection::connect_as(&addr, Some(&creds)).await.unwrap();
    let ping = || Header::request(Opcode::Ping, 1, ObjectId::new(0, 0));
    conn.call(ping(), Bytes::new()).await.unwrap();

    registry::remove_entity(a.meta.as_ref(), &creds.entity)
        .await
        .unwrap();
    // Bound: the OSDs check every second; give them five.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !conn.is_dead() {
        assert!(
            Instant::now() < deadline,
            "the revoked session is still open"
        );
        let _ = conn.call(ping(), Bytes::new()).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let e = Connection::connect_as(&addr, Some(&creds))
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("refused entity client.hv1"), "{e}");
    let revoked: u64 = a
        .osds
        .iter()
        .map(|h| h.osd.auth_counters.revoked_sessions.load(Ordering::Relaxed))
        .sum();
    assert_eq!(revoked, 1);
    // Re-added, it has a new key: the old one stays dead, the new one works.
    let again = a.add("client.hv1", Caps::DATA).await;
    assert_ne!(again.key, creds.key);
    assert!(Connection::connect_as(&addr, Some(&creds)).await.is_err());
    let fresh = Connection::connect_as(&addr, Some(&again)).await.unwrap();
    fresh.call(ping(), Bytes::new()).await.unwrap();
    let v = admin.open_volume("v").await.unwrap();
    v.write(0, Bytes::from(vec![1u8; 4096]), true)
        .await
        .unwrap();
}
