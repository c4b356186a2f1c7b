//! Shared harness of the OSD integration tests: three real OSDs on loopback with an embedded
//! metadata store, and the map a monitor would publish for them.

// Each test file uses a different subset of the helpers.
#![allow(dead_code)]

use basalt_meta::EmbeddedMeta;
use basalt_osd::{Osd, OsdConfig, OsdHandle};
use basalt_placement::{ClusterMap, FailureDomain, OsdInfo, PoolSpec};
use basalt_store::StoreOptions;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::watch;

/// Object size of the test pool.
pub const OBJECT_SIZE: u32 = 64 << 10;

/// Three OSDs of one host (failure domain `osd`, addresses filled in by [`start_osds`]) and
/// pool 1: 3 replicas, min_size 2, 8 PGs.
pub fn base_map() -> ClusterMap {
    let mut map = ClusterMap::default();
    for id in 0..3 {
        map.osds.insert(
            id,
            OsdInfo {
                id,
                host: "localhost".into(),
                addr: String::new(),
                weight: 1,
                up: true,
                is_in: true,
                incarnation: 0,
                io: String::new(),
                up_from: 0,
                unflushed: false,
                ..Default::default()
            },
        );
    }
    map.pools.insert(
        1,
        PoolSpec {
            id: 1,
            name: "rbd".into(),
            size: 3,
            min_size: 2,
            pg_count: 8,
            failure_domain: FailureDomain::Osd,
            object_size: OBJECT_SIZE,
            ec: None,
            device_class: None,
            pg_count_since: 0,
            pg_count_before: 0,
        },
    );
    map
}

/// The configuration of test OSD `id`: a store of `capacity_bytes` in `dir` (objects of
/// [`OBJECT_SIZE`]), TCP on an ephemeral loopback port, no stray scan.
pub fn osd_config(dir: &Path, id: u32, capacity_bytes: u64) -> OsdConfig {
    OsdConfig {
        id,
        // Several test clusters share one disk: their stores stay sparse.
        store: basalt_osd::StoreLocation::SparseFile(dir.join(format!("osd{id}.dat"))),
        store_options: StoreOptions {
            capacity_bytes,
            object_size_bytes: OBJECT_SIZE,
            ..StoreOptions::default()
        },
        listen: "127.0.0.1:0".parse().expect("a valid address"),
        network: basalt_osd::Network::Tcp,
        create_if_missing: true,
        incarnation: None,
        recovery: basalt_osd::RecoveryConfig::default(),
        stray_scan: None,
        auth: None,
        // What a daemon runs: direct I/O through io_uring (buffered on tmpfs).
        io: basalt_store::IoOptions::DAEMON_DEFAULT,
        heartbeat: None,
    }
}

/// Start three OSDs on loopback and publish a map with their addresses and incarnations
/// (as the monitor would). PG records live in `meta`.
pub async fn start_osds(
    dir: &Path,
    map: &mut ClusterMap,
    meta: &Arc<EmbeddedMeta>,
) -> (Vec<OsdHandle>, watch::Sender<Arc<ClusterMap>>) {
    start_osds_with(dir, map, meta, None).await
}

/// [`start_osds`] with every TCP connection authenticated against `auth`.
pub async fn start_osds_with(
    dir: &Path,
    map: &mut ClusterMap,
    meta: &Arc<EmbeddedMeta>,
    auth: Option<Arc<basalt_auth::Authority>>,
) -> (Vec<OsdHandle>, watch::Sender<Arc<ClusterMap>>) {
    let (tx, rx) = watch::channel(Arc::new(map.clone()));
    let mut handles = Vec::new();
    for id in 0..3u32 {
        let mut config = osd_config(dir, id, 256 << 20);
        config.auth = auth.clone();
        let h = Osd::start(config, rx.clone(), meta.clone())
            .await
            .expect("start an OSD");
        let info = map.osds.get_mut(&id).expect("the OSD is in the map");
        info.addr = h.addr.to_string();
        info.incarnation = h.osd.incarnation;
        handles.push(h);
    }
    map.recompute();
    tx.send_replace(Arc::new(map.clone()));
    (handles, tx)
}

/// Three OSDs, the map publisher (kept alive) and a client.
pub struct TestCluster {
    pub _dir: tempfile::TempDir,
    pub osds: Vec<OsdHandle>,
    pub _maps: watch::Sender<Arc<ClusterMap>>,
    pub cluster: Arc<basalt_client::Cluster>,
}

/// Start a [`TestCluster`]; with `local`, osd.0 is reached in-process (the co-located
/// client path) and the others over TCP, so both paths run.
pub async fn test_cluster(local: bool) -> TestCluster {
    let dir = tempfile::tempdir().expect("make a temporary directory");
    let mut map = base_map();
    let meta = Arc::new(EmbeddedMeta::in_memory());
    let (osds, maps) = start_osds(dir.path(), &mut map, &meta).await;
    let cluster = basalt_client::Cluster::new(meta, maps.subscribe());
    if local {
        let handler = Arc::new(basalt_osd::LocalOsd(osds[0].osd.clone()));
        cluster.add_local_osd(0, &osds[0].addr.to_string(), handler);
    }
    TestCluster {
        _dir: dir,
        osds,
        _maps: maps,
        cluster,
    }
}
