//! Goal: OSDs whose stores are on raw block devices (loop devices with direct I/O, prepared
//! like `basalt disk prepare`) serve a volume whose data survives a restart of every OSD,
//! writes with partial blocks read nothing while a writer waits and leave identical copies; an
//! OSD pointed at an unprepared device refuses to start and says how to prepare it.
//!
//! Needs root and `losetup` (util-linux): without them the test fails, it is not skipped.

// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns.
#![allow(clippy::unwrap_used)]

mod common;

use basalt_client::Cluster;
use basalt_meta::EmbeddedMeta;
use basalt_osd::{Osd, OsdHandle, StoreLocation};
use basalt_placement::ClusterMap;
use basalt_store::prepare::{self, PrepareOptions};
use bytes::Bytes;
use common::{base_map, osd_config, OBJECT_SIZE};
use std::sync::Arc;
use tokio::sync::watch;

#[path = "../../store/tests/support/loop_device.rs"]
mod loop_device;

use loop_device::LoopDevice;

/// Start OSDs 0..3 on `devices` and publish their addresses.
async fn start_on(
    devices: &[LoopDevice],
    map: &mut ClusterMap,
    meta: &Arc<EmbeddedMeta>,
    dir: &std::path::Path,
) -> (Vec<OsdHandle>, watch::Sender<Arc<ClusterMap>>) {
    let (tx, rx) = watch::channel(Arc::new(map.clone()));
    let mut handles = Vec::new();
    for (id, device) in (0..3u32).zip(devices) {
        let mut config = osd_config(dir, id, 0);
        config.store = StoreLocation::Device(device.path.clone());
        let h = Osd::start(config, rx.clone(), meta.clone()).await.unwrap();
        let info = map.osds.get_mut(&id).unwrap();
        info.addr = h.addr.to_string();
        info.incarnation = h.osd.incarnation;
        handles.push(h);
    }
    map.recompute();
    tx.send_replace(Arc::new(map.clone()));
    (handles, tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn osds_on_prepared_devices_keep_a_volume_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let devices: Vec<LoopDevice> = (0..3).map(|_| LoopDevice::new(64 << 20, &[])).collect();

    // Unprepared: refused, naming the device and the fix.
    let (_tx, rx) = watch::channel(Arc::new(base_map()));
    let meta = Arc::new(EmbeddedMeta::in_memory());
    let mut config = osd_config(dir.path(), 0, 0);
    config.store = StoreLocation::Device(devices[0].path.clone());
    let err = match Osd::start(config, rx, meta.clone()).await {
        Ok(_) => panic!("an OSD started on an unprepared device"),
        Err(e) => e,
    };
    let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    let dev = devices[0].path.display();
    assert_eq!(
        chain,
        format!(
            "open store {dev}: {dev} holds no Basalt store; run `basalt disk prepare {dev}` first"
        )
    );

    let opts = PrepareOptions {
        object_size_bytes: OBJECT_SIZE,
        ..PrepareOptions::default()
    };
    for d in &devices {
        prepare::prepare(&d.path, &opts).unwrap();
    }
    let mut map = base_map();
    let (osds, tx) = start_on(&devices, &mut map, &meta, dir.path()).await;
    let cluster = Cluster::new(meta.clone(), tx.subscribe());
    cluster.create_volume("v", 4 << 20, 1).await.unwrap();
    let volume = cluster.open_volume("v").await.unwrap();
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
    volume
        .write(12_345, Bytes::from(data.clone()), false)
        .await
        .unwrap();
    // Writes with partial blocks: the primary reads them ahead and forwards whole blocks,
    // so no OSD reads a block while a writer waits; every copy ends identical.
    volume
        .write(100, Bytes::from_static(b"ten bytes."), false)
        .await
        .unwrap();
    volume
        .write(4000, Bytes::from(vec![7u8; 300]), false)
        .await
        .unwrap();
    volume.flush().await.unwrap();
    for h in &osds {
        let stats = h.osd.store.wal_stats();
        assert_eq!(stats.edge_reads_inline, 0, "osd.{}", h.osd.id);
    }
    let copies: Vec<Vec<(basalt_proto::ObjectId, Vec<u8>)>> = osds
        .iter()
        .map(|h| {
            let mut objects = h.osd.store.objects();
            objects.sort();
            objects
                .into_iter()
                .map(|(obj, _)| {
                    let mut data = vec![0u8; OBJECT_SIZE as usize];
                    h.osd.store.read(obj, 0, &mut data).unwrap();
                    (obj, data)
                })
                .collect()
        })
        .collect();
    assert!(!copies[0].is_empty());
    assert!(
        copies.iter().all(|c| *c == copies[0]),
        "the replicas' copies differ from the primary's"
    );
    drop(volume);
    drop(cluster);
    for h in osds {
        h.shutdown().await.unwrap();
    }

    let mut map = base_map();
    let (_osds, tx) = start_on(&devices, &mut map, &meta, dir.path()).await;
    let cluster = Cluster::new(meta, tx.subscribe());
    let volume = cluster.open_volume("v").await.unwrap();
    let after = volume.read(12_345, 1 << 20).await.unwrap();
    assert!(after[..] == data[..], "data changed across an OSD restart");
    let head = volume.read(0, 4400).await.unwrap();
    assert_eq!(&head[100..110], b"ten bytes.");
    assert!(head[4000..4300].iter().all(|&b| b == 7));
    assert!(head[..100]
        .iter()
        .chain(&head[110..4000])
        .chain(&head[4300..])
        .all(|&b| b == 0));
}
