//! Replication through real OSDs on loopback: every replica ends up identical, and the data
//! survives a restart of every OSD.

mod common;

use basalt_client::Cluster;
use basalt_meta::EmbeddedMeta;
use basalt_placement::ClusterMap;
use basalt_proto::ObjectId;
use bytes::Bytes;
use common::{base_map, start_osds, OBJECT_SIZE};
use std::sync::Arc;

/// Goal: concurrent overlapping writes from many tasks leave all three replicas byte-identical
/// and equal to what the volume reads back; after a restart of every OSD nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_identical_and_durable() {
    let dir = tempfile::tempdir().unwrap();
    let mut map = base_map();
    let meta = Arc::new(EmbeddedMeta::in_memory());
    let (osds, tx) = start_osds(dir.path(), &mut map, &meta).await;
    let cluster = Cluster::new(meta.clone(), tx.subscribe());
    // osd.0 is reached in-process, the others over TCP: both client paths are exercised.
    let local = Arc::new(basalt_osd::LocalOsd(osds[0].osd.clone()));
    cluster.add_local_osd(0, &osds[0].addr.to_string(), local);
    let info = cluster.create_volume("v", 4 << 20, 1).await.unwrap();
    let volume = Arc::new(cluster.open_volume("v").await.unwrap());

    // 16 writers hammer the same 8 objects with overlapping, unaligned writes.
    let mut tasks = Vec::new();
    for w in 0..16u64 {
        let volume = volume.clone();
        tasks.push(tokio::spawn(async move {
            let mut x = w * 7919 + 1;
            for _ in 0..64 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let offset = (x >> 20) % ((8 * OBJECT_SIZE as u64) - 20_000);
                let len = 512 + (x >> 40) % 16_000;
                let data = Bytes::from(vec![(x >> 56) as u8; len as usize]);
                volume.write(offset, data, false).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    volume.flush().await.unwrap();

    let through_volume = volume.read(0, 8 * OBJECT_SIZE).await.unwrap();
    for index in 0..8u64 {
        let obj = ObjectId::new(info.id, index);
        let mut copies = Vec::new();
        for h in &osds {
            let mut buf = vec![0u8; OBJECT_SIZE as usize];
            h.osd.store.read(obj, 0, &mut buf).unwrap();
            copies.push(buf);
        }
        assert_eq!(copies[0], copies[1], "object {index}: osd0 and osd1 differ");
        assert_eq!(copies[0], copies[2], "object {index}: osd0 and osd2 differ");
        let start = (index * OBJECT_SIZE as u64) as usize;
        assert_eq!(
            &through_volume[start..start + OBJECT_SIZE as usize],
            &copies[0][..],
            "object {index}: volume read differs from the replicas"
        );
    }

    // Restart every OSD: flushed data must still be there.
    drop(volume);
    drop(cluster);
    for h in osds {
        h.shutdown().await.unwrap();
    }
    let mut map = base_map();
    let (_osds, tx) = start_osds(dir.path(), &mut map, &meta).await;
    let cluster = Cluster::new(meta, tx.subscribe());
    let volume = cluster.open_volume("v").await.unwrap();
    let after = volume.read(0, 8 * OBJECT_SIZE).await.unwrap();
    assert_eq!(after, through_volume, "data changed across an OSD restart");
}

/// Goal: out-of-range volume I/O is refused with a precise error, and trimmed ranges read back
/// as zeros and show as holes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_checks_and_trim() {
    let dir = tempfile::tempdir().unwrap();
    let mut map = base_map();
    let meta = Arc::new(EmbeddedMeta::in_memory());
    let (_osds, tx) = start_osds(dir.path(), &mut map, &meta).await;
    let cluster = Cluster::new(meta, tx.subscribe());
    cluster.create_volume("v", 1 << 20, 1).await.unwrap();
    let volume = cluster.open_volume("v").await.unwrap();

    let err = volume.read((1 << 20) - 100, 200).await.unwrap_err();
    assert!(err.to_string().contains("beyond the end"), "{err}");
    assert!(volume
        .write(1 << 20, Bytes::from_static(b"x"), false)
        .await
        .is_err());

    volume
        .write(0, Bytes::from(vec![0xee; 256 << 10]), false)
        .await
        .unwrap();
    volume.trim(64 << 10, 128 << 10, false).await.unwrap();
    let data = volume.read(0, 256 << 10).await.unwrap();
    assert!(data[..64 << 10].iter().all(|&b| b == 0xee));
    assert!(data[64 << 10..192 << 10].iter().all(|&b| b == 0));
    assert!(data[192 << 10..].iter().all(|&b| b == 0xee));
    let extents = volume.allocation(0, 256 << 10).await.unwrap();
    let kinds: Vec<(u64, bool)> = extents.iter().map(|e| (e.length, e.allocated)).collect();
    assert_eq!(
        kinds,
        vec![(64 << 10, true), (128 << 10, false), (64 << 10, true)]
    );
}

/// Goal: a damaged block in the primary's copy is never returned: the read is served from a
/// replica's good copy, while the primary's own store reports the damage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_primary_copy_is_served_from_a_replica() {
    let dir = tempfile::tempdir().unwrap();
    let mut map = base_map();
    let meta = Arc::new(EmbeddedMeta::in_memory());
    let (osds, tx) = start_osds(dir.path(), &mut map, &meta).await;
    let cluster = Cluster::new(meta.clone(), tx.subscribe());
    let info = cluster.create_volume("v", 1 << 20, 1).await.unwrap();
    let volume = cluster.open_volume("v").await.unwrap();
    // Distinct random content so the block can be found in the store file.
    let mut x = 0x1234_5678_9abc_def0u64;
    let data: Vec<u8> = (0..OBJECT_SIZE)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    volume
        .write(0, Bytes::from(data.clone()), true)
        .await
        .unwrap();
    drop(volume);
    drop(cluster);
    for h in osds {
        h.shutdown().await.unwrap();
    }

    let obj = ObjectId::new(info.id, 0);
    let pg = ClusterMap::pg_of(&map.pools[&1], obj);
    let primary = map.acting(pg).unwrap()[0];
    let path = dir.path().join(format!("osd{primary}.dat"));
    let mut file = std::fs::read(&path).unwrap();
    let needle = &data[4096..8192];
    let at = file
        .windows(4096)
        .step_by(4096)
        .position(|w| w == needle)
        .expect("block 1 of the object in the primary's file")
        * 4096;
    file[at + 100] ^= 0x10;
    std::fs::write(&path, &file).unwrap();

    let mut map = base_map();
    let (osds, tx) = start_osds(dir.path(), &mut map, &meta).await;
    let mut buf = vec![0u8; 8192];
    let direct = osds[primary as usize].osd.store.read(obj, 0, &mut buf);
    assert!(
        matches!(direct, Err(basalt_store::StoreError::Checksum { .. })),
        "the primary's store must report the damage, got {direct:?}"
    );
    let cluster = Cluster::new(meta, tx.subscribe());
    let volume = cluster.open_volume("v").await.unwrap();
    let read = volume.read(0, OBJECT_SIZE).await.unwrap();
    assert!(
        read[..] == data[..],
        "the volume must return the replicas' good data"
    );
}

/// Goal: slots freed by whole-object rewrites become reusable soon without any client flush
/// (the OSD's background flusher confirms them), so a rewrite loop cycles through a few
/// recently freed slots instead of walking through every free slot of the store file.
/// Regression: before, remap records never reached the flusher's byte threshold and the
/// frees waited forever (1 MiB writes fell to 160 MiB/s as tmpfs stores grew to capacity).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freed_slots_are_confirmed_without_a_client_flush() {
    let tc = common::test_cluster(false).await;
    tc.cluster
        .create_volume("v", 4 * OBJECT_SIZE as u64, 1)
        .await
        .unwrap();
    let volume = tc.cluster.open_volume("v").await.unwrap();
    let whole = |n: usize| Bytes::from(vec![n as u8; 4 * OBJECT_SIZE as usize]);
    for n in 0..50 {
        volume.write(0, whole(n), false).await.unwrap();
    }
    // Bounded: the flusher ticks every 20 ms.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let pending: Vec<usize> = tc
            .osds
            .iter()
            .map(|h| h.osd.store.pending_freed_slots())
            .collect();
        if pending.iter().all(|&p| p == 0) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "freed slots still unconfirmed after 10 s: {pending:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let data = volume.read(0, 4 * OBJECT_SIZE).await.unwrap();
    assert_eq!(data, whole(49));
}

/// Damage `len` bytes at byte `at` of `obj`'s slot in the store file of `h` (below the
/// store's checksums, as a failing disk would).
fn damage(h: &basalt_osd::OsdHandle, dir: &std::path::Path, obj: ObjectId, at: u64) {
    use std::os::unix::fs::FileExt;
    let offset = h.osd.store.object_offset(obj).expect("object stored");
    let path = dir.join(format!("osd{}.dat", h.osd.id));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open the store file");
    f.write_all_at(&[0xa5; 32], offset + at)
        .expect("damage the copy");
    f.sync_all().expect("sync the store file");
}

/// Goal: scrub finds and repairs, in a replicated pool, a primary copy and a replica copy
/// damaged on disk and a replica that silently differs at the same version; a clean pool
/// scrubs clean, and every copy is equal afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrub_repairs_damaged_and_different_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let mut map = base_map();
    let meta = Arc::new(EmbeddedMeta::in_memory());
    let (osds, tx) = start_osds(dir.path(), &mut map, &meta).await;
    let cluster = Cluster::new(meta.clone(), tx.subscribe());
    let info = cluster.create_volume("v", 1 << 20, 1).await.unwrap();
    let volume = cluster.open_volume("v").await.unwrap();
    for i in 0..8u64 {
        let data = Bytes::from(vec![0x10 + i as u8; OBJECT_SIZE as usize]);
        volume
            .write(i * OBJECT_SIZE as u64, data, false)
            .await
            .unwrap();
    }
    volume.flush().await.unwrap();
    let clean = cluster.scrub(None, &|_, _| {}).await.unwrap();
    assert_eq!((clean.objects, clean.inconsistent), (8, 0), "{clean:?}");

    let pool = &map.pools[&1];
    let acting = |index: u64| {
        let obj = ObjectId::new(info.id, index);
        let pg = ClusterMap::pg_of(pool, obj);
        (obj, map.acting(pg).unwrap().to_vec())
    };
    // Object 0: the primary's copy damaged. Object 1: a replica's copy damaged.
    let (o0, a0) = acting(0);
    damage(&osds[a0[0] as usize], dir.path(), o0, 5000);
    let (o1, a1) = acting(1);
    damage(&osds[a1[2] as usize], dir.path(), o1, 100);
    // Object 2: a replica rewritten behind the primary's back, same version.
    let (o2, a2) = acting(2);
    let replica = &osds[a2[1] as usize].osd.store;
    let v = replica.version(o2).unwrap();
    replica
        .write(o2, 0, &vec![0xee; OBJECT_SIZE as usize], v)
        .unwrap();

    let report = cluster.scrub(None, &|_, _| {}).await.unwrap();
    assert_eq!(
        (report.objects, report.inconsistent, report.repaired),
        (8, 3, 3),
        "{report:?}"
    );
    for (obj, want) in [(o0, 0x10u8), (o1, 0x11), (o2, 0x12)] {
        for h in &osds {
            let mut buf = vec![0u8; OBJECT_SIZE as usize];
            h.osd
                .store
                .read(obj, 0, &mut buf)
                .expect("every copy reads cleanly");
            assert!(buf.iter().all(|&b| b == want), "osd.{} {obj}", h.osd.id);
        }
    }
    let again = cluster.scrub(None, &|_, _| {}).await.unwrap();
    assert_eq!(again.inconsistent, 0, "{again:?}");
}

/// Goal: objects of a pool `basalt pool rm` removed (a volume removal cut short left them)
/// are deleted by the stray scan once the removal is recorded; objects of a pool this OSD's
/// map does not have but nobody removed (a pool made after its map) are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stray_scan_deletes_objects_of_removed_pools_only() {
    use basalt_proto::{make_inode, Version};
    let dir = tempfile::tempdir().unwrap();
    let map = base_map();
    let meta = Arc::new(EmbeddedMeta::in_memory());
    let (_tx, rx) = tokio::sync::watch::channel(Arc::new(map.clone()));
    let mut config = common::osd_config(dir.path(), 0, 64 << 20);
    config.stray_scan = Some(std::time::Duration::from_millis(100));
    let h = basalt_osd::Osd::start(config, rx, meta.clone())
        .await
        .unwrap();
    let removed = ObjectId::new(make_inode(9, 1, 0), 0);
    let unknown = ObjectId::new(make_inode(10, 1, 0), 0);
    let version = Version::new(1, 1);
    for obj in [removed, unknown] {
        h.osd.store.write(obj, 0, b"left behind", version).unwrap();
    }
    let record = basalt_meta::schema::RemovedPoolRecord {
        id: 9,
        name: "gone".into(),
        removed_unix: 0,
    };
    use basalt_meta::MetaStore;
    meta.put(
        &basalt_meta::schema::removed_pool_key(9),
        serde_json::to_vec(&record).unwrap(),
    )
    .await
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // Bound: 10 s of 50 ms rounds (the scan runs every 100 ms).
    while h.osd.store.version(removed).is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the removed pool's object is still there"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Several more scans: the pool nobody removed keeps its object.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert_eq!(h.osd.store.version(unknown), Some(version));
    h.shutdown().await.unwrap();
}

/// Goal: LOCAL_READ (a gateway asking a member for its own copy) is honoured only on a
/// gateway's READ; on a write, a trim or a replica's request it is refused with Invalid and
/// nothing changes, never served as if the flag were absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_read_flag_is_refused_outside_a_gateway_read() {
    use basalt_proto::{Flags, Header, Opcode, Status};
    let dir = tempfile::tempdir().unwrap();
    let mut map = base_map();
    let meta = Arc::new(EmbeddedMeta::in_memory());
    let (osds, tx) = start_osds(dir.path(), &mut map, &meta).await;
    let cluster = Cluster::new(meta.clone(), tx.subscribe());
    let info = cluster.create_volume("v", 1 << 20, 1).await.unwrap();
    let volume = cluster.open_volume("v").await.unwrap();
    volume
        .write(0, Bytes::from(vec![0x5a; 4096]), true)
        .await
        .unwrap();

    let map = tx.borrow().clone();
    let obj = ObjectId::new(info.id, 0);
    let pg = ClusterMap::pg_of(&map.pools[&1], obj);
    let acting = map.acting(pg).unwrap().to_vec();
    for &osd in &acting {
        let conn = basalt_client::Connection::connect(&osds[osd as usize].addr.to_string())
            .await
            .unwrap();
        let request = |opcode, flags: u16, payload: &[u8]| {
            let mut h = Header::request(opcode, 1, obj);
            h.flags.0 |= flags;
            h.pg = pg;
            h.map_epoch = map.epoch;
            h.length = if payload.is_empty() {
                4096
            } else {
                payload.len() as u32
            };
            (h, Bytes::copy_from_slice(payload))
        };
        let refused = [
            (
                "WRITE",
                request(Opcode::Write, Flags::LOCAL_READ, &[0xee; 4096]),
            ),
            ("TRIM", request(Opcode::Trim, Flags::LOCAL_READ, &[])),
            (
                "a replica's READ",
                request(Opcode::Read, Flags::LOCAL_READ | Flags::REPLICA, &[]),
            ),
        ];
        for (what, (h, payload)) in refused {
            let reply = conn.call(h, payload).await.unwrap();
            assert_eq!(
                reply.header.status,
                Status::Invalid,
                "osd.{osd}: {what} with LOCAL_READ was not refused"
            );
        }
    }
    let data = volume.read(0, 4096).await.unwrap();
    assert!(
        data.iter().all(|&b| b == 0x5a),
        "a refused request changed the data"
    );
}
