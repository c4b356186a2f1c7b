//! Layers through three real OSDs on loopback: a clone reads its parent snapshot, its first
//! write copies the whole object up on every replica, trims of shadowed objects leave zeros
//! (not the parent's bytes), frozen layers refuse stale I/O, and a snapshot whose command
//! died half-way is finished by the next writer.

mod common;

use basalt_client::ClientError;
use basalt_meta::schema::{frozen_key, FrozenRecord};
use basalt_proto::{Flags, Header, ObjectId, Opcode, Status};
use bytes::Bytes;
use common::{test_cluster, TestCluster, OBJECT_SIZE};
use std::time::{Duration, Instant};

const OS: u64 = OBJECT_SIZE as u64;

fn filled(byte: u8, len: u64) -> Bytes {
    Bytes::from(vec![byte; len as usize])
}

/// Every OSD's stored copy of `obj` (None: absent), read straight from the stores.
fn copies(tc: &TestCluster, obj: ObjectId) -> Vec<Option<(Vec<u64>, Vec<u8>)>> {
    tc.osds
        .iter()
        .map(|h| {
            h.osd.store.version(obj)?;
            let mut buf = vec![0u8; OS as usize];
            h.osd.store.read(obj, 0, &mut buf).expect("read the object");
            Some((
                h.osd
                    .store
                    .allocation(obj)
                    .expect("the allocation of the object"),
                buf,
            ))
        })
        .collect()
}

fn status_of(e: &ClientError) -> Option<Status> {
    match e {
        ClientError::Status { status } => Some(*status),
        _ => None,
    }
}

/// Goal: a clone reads through to its snapshot; its first write to a shadowed object
/// copies the whole object up, identically on every replica, leaving the snapshot as it
/// was; a trim or delete of a shadowed object reads back zeros and keeps a whiteout; an
/// object no ancestor holds behaves as in a flat volume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_copies_up_whole_objects_and_whiteouts_trims() {
    let tc = test_cluster(false).await;
    let c = &tc.cluster;
    c.create_volume("base", 8 * OS, 1).await.unwrap();
    let base = c.open_volume("base").await.unwrap();
    base.write(0, filled(0xa1, OS / 2), false).await.unwrap();
    base.write(OS, filled(0xa2, OS), false).await.unwrap();
    base.write(2 * OS, filled(0xa3, OS), false).await.unwrap();
    let snap = c.snapshot_volume("base", "s1").await.unwrap();
    let clone = c.clone_snapshot("base", "s1", "clone").await.unwrap();
    assert_eq!(clone.size, 8 * OS);
    let cv = c.open_volume("clone").await.unwrap();
    assert_eq!(
        &cv.read(0, OS as u32).await.unwrap()[..],
        &{
            let mut v = vec![0xa1; (OS / 2) as usize];
            v.resize(OS as usize, 0);
            v
        }[..]
    );

    // First write to object 0 of the clone: a copy-up.
    cv.write(OS / 2, filled(0xc1, 4096), false).await.unwrap();
    let obj0 = ObjectId::new(clone.id, 0);
    let held = copies(&tc, obj0);
    let first = held[0]
        .clone()
        .expect("the primary holds the clone's object");
    assert!(
        held.iter().all(|c| c.as_ref() == Some(&first)),
        "replicas identical"
    );
    let blocks: u32 = first.0.iter().map(|w| w.count_ones()).sum();
    assert_eq!(
        blocks as u64,
        OS / 4096,
        "copied up whole: every block allocated"
    );
    let mut want = vec![0xa1u8; (OS / 2) as usize];
    want.extend_from_slice(&[0xc1; 4096]);
    want.resize(OS as usize, 0);
    assert_eq!(first.1, want);
    let snap_obj = copies(&tc, ObjectId::new(snap.inode, 0));
    assert!(snap_obj.iter().all(|c| c
        .as_ref()
        .is_some_and(|c| c.1[..(OS / 2) as usize].iter().all(|b| *b == 0xa1)
            && c.1[(OS / 2) as usize..].iter().all(|b| *b == 0))));

    // Trim (delete) a whole shadowed object the clone lacks, and part of one it holds.
    cv.trim(OS, OS, false).await.unwrap();
    assert_eq!(cv.read(OS, OS as u32).await.unwrap(), filled(0, OS));
    assert!(
        copies(&tc, ObjectId::new(clone.id, 1))
            .iter()
            .all(|c| c.is_some()),
        "whiteout"
    );
    cv.trim(0, OS / 2, false).await.unwrap();
    assert_eq!(
        cv.read(0, (OS / 2) as u32).await.unwrap(),
        filled(0, OS / 2)
    );
    assert_eq!(cv.read(OS / 2, 4096).await.unwrap(), filled(0xc1, 4096));
    // Zeros written over part of a shadowed object the clone lacks.
    cv.write_zeroes(2 * OS + 4096, 8192, true, false)
        .await
        .unwrap();
    let obj2 = cv.read(2 * OS, OS as u32).await.unwrap();
    assert!(obj2[..4096].iter().all(|b| *b == 0xa3));
    assert!(obj2[4096..12288].iter().all(|b| *b == 0));
    assert!(obj2[12288..].iter().all(|b| *b == 0xa3));

    // The parent volume and its snapshot are untouched.
    for v in [&base, &c.open_snapshot("base", "s1").await.unwrap()] {
        assert_eq!(v.read(OS, OS as u32).await.unwrap(), filled(0xa2, OS));
        assert_eq!(v.read(0, 4096).await.unwrap(), filled(0xa1, 4096));
        assert_eq!(v.read(2 * OS, OS as u32).await.unwrap(), filled(0xa3, OS));
    }
    // An object no layer holds: trimming it leaves nothing behind.
    cv.write(5 * OS, filled(0xc5, OS), false).await.unwrap();
    cv.trim(5 * OS, OS, false).await.unwrap();
    assert!(copies(&tc, ObjectId::new(clone.id, 5))
        .iter()
        .all(|c| c.is_none()));

    // Allocation falls through to the layer that holds the object.
    let extents = cv.allocation(3 * OS, OS).await.unwrap();
    assert!(extents.iter().all(|e| !e.allocated), "{extents:?}");
    let extents = c
        .open_snapshot("base", "s1")
        .await
        .unwrap()
        .allocation(OS, OS)
        .await
        .unwrap();
    assert!(extents.iter().all(|e| e.allocated), "{extents:?}");
}

/// Goal: once a snapshot froze a layer, client writes to it and reads without the
/// SNAPSHOT flag answer Frozen (a stale gateway must not touch the old head), reads with
/// the flag are served, and a snapshot view refuses writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_layers_refuse_stale_io() {
    let tc = test_cluster(false).await;
    let c = &tc.cluster;
    let info = c.create_volume("v", 4 * OS, 1).await.unwrap();
    let v = c.open_volume("v").await.unwrap();
    v.write(0, filled(0x5a, OS), false).await.unwrap();
    c.snapshot_volume("v", "s").await.unwrap();
    let old = ObjectId::new(info.id, 0);
    let pg = c.pg_of(old).unwrap();
    let mut write = Header::request(Opcode::Write, 0, old);
    write.length = 4096;
    let e = c
        .object_request(pg, write, filled(1, 4096))
        .await
        .unwrap_err();
    assert_eq!(status_of(&e), Some(Status::Frozen), "{e}");
    let mut read = Header::request(Opcode::Read, 0, old);
    read.length = 4096;
    let e = c.object_request(pg, read, Bytes::new()).await.unwrap_err();
    assert_eq!(status_of(&e), Some(Status::Frozen), "{e}");
    read.flags = Flags(Flags::SNAPSHOT);
    let r = c.object_request(pg, read, Bytes::new()).await.unwrap();
    assert_eq!(r.payload, filled(0x5a, 4096));
    // The handle opened before the snapshot follows the volume to its new head.
    v.write(0, filled(0x6b, 4096), false).await.unwrap();
    assert_eq!(v.read(0, 4096).await.unwrap(), filled(0x6b, 4096));
    let snap = c.open_snapshot("v", "s").await.unwrap();
    assert!(snap.read_only());
    assert_eq!(snap.read(0, 4096).await.unwrap(), filled(0x5a, 4096));
    assert!(matches!(
        snap.write(0, filled(1, 4096), false).await,
        Err(ClientError::ReadOnly { .. })
    ));
}

/// Goal: a snapshot whose command died after freezing the head (the frozen record written,
/// every OSD fenced, the head not moved) does not block writers for good: the next write
/// waits, finishes the snapshot itself and lands on the new head; the snapshot holds what
/// was written before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_taken_snapshot_is_finished_by_the_next_writer() {
    let tc = test_cluster(false).await;
    let c = &tc.cluster;
    let info = c.create_volume("v", 4 * OS, 1).await.unwrap();
    let v = c.open_volume("v").await.unwrap();
    v.write(0, filled(0x11, 4096), false).await.unwrap();
    let next_head = basalt_client::volumes::next_family_layer(c.meta().as_ref(), info.id)
        .await
        .unwrap();
    let frozen = FrozenRecord {
        inode: info.id,
        volume: "v".into(),
        snapshot: "crashed".into(),
        next_head,
        size: info.size,
        created: 0,
        rollback_to: None,
    };
    c.meta()
        .put(&frozen_key(info.id), serde_json::to_vec(&frozen).unwrap())
        .await
        .unwrap();
    for osd in 0..3 {
        let conn = c.connection(osd).await.unwrap();
        let reply = conn
            .start(
                Header::request(Opcode::Fence, 0, ObjectId::new(info.id, 0)),
                Bytes::new(),
            )
            .await
            .unwrap();
        assert_eq!(reply.header.status, Status::Ok);
    }
    let started = Instant::now();
    v.write(0, filled(0x22, 4096), false).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "the writer waited for the snapshot's own command first"
    );
    let now = c.volume_info("v").await.unwrap();
    assert_eq!(now.id, next_head);
    assert_eq!(now.snapshots.len(), 1);
    assert_eq!(now.snapshots[0].name, "crashed");
    let snap = c.open_snapshot("v", "crashed").await.unwrap();
    assert_eq!(snap.read(0, 4096).await.unwrap(), filled(0x11, 4096));
    assert_eq!(v.read(0, 4096).await.unwrap(), filled(0x22, 4096));
}

/// Goal: a 10-deep chain of snapshots reads each snapshot's own data through every layer,
/// and a clone of a clone reads through both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_chains_and_clones_of_clones() {
    let tc = test_cluster(false).await;
    let c = &tc.cluster;
    c.create_volume("v", 16 * OS, 1).await.unwrap();
    let v = c.open_volume("v").await.unwrap();
    for i in 0..10u64 {
        // Object i gets byte i+1; object 0 is rewritten every round.
        v.write(i * OS, filled(i as u8 + 1, 4096), false)
            .await
            .unwrap();
        v.write(0, filled(0x80 + i as u8, 512), false)
            .await
            .unwrap();
        c.snapshot_volume("v", &format!("s{i}")).await.unwrap();
    }
    for i in 0..10u64 {
        let s = c.open_snapshot("v", &format!("s{i}")).await.unwrap();
        assert_eq!(
            s.read(0, 512).await.unwrap(),
            filled(0x80 + i as u8, 512),
            "s{i}"
        );
        for j in 1..10u64 {
            let want = if j <= i { j as u8 + 1 } else { 0 };
            assert_eq!(
                s.read(j * OS, 4096).await.unwrap(),
                filled(want, 4096),
                "s{i} obj {j}"
            );
        }
    }
    c.clone_snapshot("v", "s9", "c1").await.unwrap();
    let c1 = c.open_volume("c1").await.unwrap();
    c1.write(12 * OS, filled(0xee, 4096), false).await.unwrap();
    c.snapshot_volume("c1", "base").await.unwrap();
    c.clone_snapshot("c1", "base", "c2").await.unwrap();
    let c2 = c.open_volume("c2").await.unwrap();
    assert_eq!(c2.read(12 * OS, 4096).await.unwrap(), filled(0xee, 4096));
    assert_eq!(c2.read(9 * OS, 4096).await.unwrap(), filled(10, 4096));
    assert_eq!(c2.read(0, 512).await.unwrap(), filled(0x89, 512));

    // Removal: refused while a clone depends on a snapshot, named in the message.
    let e = c.remove_volume("v").await.unwrap_err().to_string();
    assert!(e.contains("c1 (of v@s9)"), "{e}");
    let e = c.remove_volume("c1").await.unwrap_err().to_string();
    assert!(e.contains("c2 (of c1@base)"), "{e}");
    // A refused removal leaves the snapshots cloneable.
    c.clone_snapshot("v", "s3", "c3").await.unwrap();
    for name in ["c3", "c2", "c1", "v"] {
        c.remove_volume(name).await.unwrap();
    }
    let left: usize = tc.osds.iter().map(|h| h.osd.store.objects().len()).sum();
    assert_eq!(left, 0, "every layer's objects were removed");
}

/// Layers of `inode` in the stores (any index).
fn objects_of_layer(tc: &TestCluster, inode: u64) -> usize {
    tc.osds
        .iter()
        .map(|h| {
            h.osd
                .store
                .objects()
                .iter()
                .filter(|(o, _)| o.inode == inode)
                .count()
        })
        .sum()
}

/// Goal: rollback makes the volume read as the snapshot (and drops the old head's data);
/// removing a snapshot copies what the layers above still read into them (every one of
/// them: after a rollback two layers sit on it) and deletes it; flatten makes a clone
/// independent, after which its parent snapshot can go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_snapshot_rm_and_flatten() {
    let tc = test_cluster(false).await;
    let c = &tc.cluster;
    c.create_volume("v", 4 * OS, 1).await.unwrap();
    let v = c.open_volume("v").await.unwrap();
    v.write(0, filled(0xa0, OS), false).await.unwrap();
    v.write(OS, filled(0xa1, OS), false).await.unwrap();
    let s1 = c.snapshot_volume("v", "s1").await.unwrap();
    v.write(0, filled(0xb0, 4096), false).await.unwrap();
    let s2 = c.snapshot_volume("v", "s2").await.unwrap();
    v.write(2 * OS, filled(0xc2, 4096), false).await.unwrap();
    let old_head = c.volume_info("v").await.unwrap().id;
    c.resize_volume("v", 8 * OS, false).await.unwrap();

    let after = c.rollback_volume("v", "s1").await.unwrap();
    assert_eq!(after.size, 4 * OS, "the snapshot's size comes back");
    assert_eq!(after.snapshots.len(), 2);
    assert_eq!(v.read(0, OS as u32).await.unwrap(), filled(0xa0, OS));
    assert_eq!(v.read(2 * OS, 4096).await.unwrap(), filled(0, 4096));
    assert_eq!(
        objects_of_layer(&tc, old_head),
        0,
        "the dropped head's data is gone"
    );
    let s2v = c.open_snapshot("v", "s2").await.unwrap();
    assert_eq!(s2v.read(0, 4096).await.unwrap(), filled(0xb0, 4096));
    v.write(3 * OS, filled(0xd3, 4096), false).await.unwrap();

    // s1 has two children now: s2's layer and the new head.
    let progress = |_: u64, _: u64| {};
    c.remove_snapshot("v", "s1", &progress).await.unwrap();
    assert_eq!(objects_of_layer(&tc, s1.inode), 0);
    assert_eq!(v.read(0, OS as u32).await.unwrap(), filled(0xa0, OS));
    assert_eq!(v.read(OS, OS as u32).await.unwrap(), filled(0xa1, OS));
    assert_eq!(v.read(3 * OS, 4096).await.unwrap(), filled(0xd3, 4096));
    let s2v = c.open_snapshot("v", "s2").await.unwrap();
    assert_eq!(s2v.read(0, 4096).await.unwrap(), filled(0xb0, 4096));
    assert_eq!(s2v.read(4096, 4096).await.unwrap(), filled(0xa0, 4096));
    assert_eq!(s2v.read(OS, OS as u32).await.unwrap(), filled(0xa1, OS));
    assert_eq!(c.volume_info("v").await.unwrap().snapshots.len(), 1);

    // A clone of s2 blocks its removal until the clone is flattened.
    c.clone_snapshot("v", "s2", "c").await.unwrap();
    let cv = c.open_volume("c").await.unwrap();
    cv.write(4096, filled(0xe0, 4096), false).await.unwrap();
    let e = c
        .remove_snapshot("v", "s2", &progress)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("c (of v@s2)"), "{e}");
    let reports = std::sync::atomic::AtomicU64::new(0);
    let counting = |done: u64, total: u64| {
        assert!(done <= total);
        reports.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    };
    let flat = c.flatten_volume("c", &counting).await.unwrap();
    assert!(flat.parent.is_none());
    assert!(reports.into_inner() >= 4, "progress reported per object");
    c.remove_snapshot("v", "s2", &progress).await.unwrap();
    assert_eq!(objects_of_layer(&tc, s2.inode), 0);
    assert_eq!(cv.read(0, 4096).await.unwrap(), filled(0xb0, 4096));
    assert_eq!(cv.read(4096, 4096).await.unwrap(), filled(0xe0, 4096));
    assert_eq!(cv.read(OS, OS as u32).await.unwrap(), filled(0xa1, OS));
    let e = c.flatten_volume("c", &progress).await.unwrap_err();
    assert!(e.to_string().contains("no parent"), "{e}");
}

/// Goal: removing a volume freezes its head first, so a handle in another process (here a
/// second client) that still has it open is refused instead of writing into the purged
/// layer, and the removal leaves no object behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removal_fences_handles_of_other_clients() {
    let tc = test_cluster(false).await;
    let c = &tc.cluster;
    c.create_volume("v", 4 * OS, 1).await.unwrap();
    let other = basalt_client::Cluster::new(c.meta().clone(), tc._maps.subscribe());
    let stale = other.open_volume("v").await.unwrap();
    stale.write(0, filled(1, 4096), false).await.unwrap();
    let head = c.volume_info("v").await.unwrap().id;
    c.remove_volume("v").await.unwrap();
    let e = stale.write(OS, filled(2, 4096), false).await.unwrap_err();
    assert!(matches!(e, ClientError::NoSuchVolume { .. }), "{e}");
    assert_eq!(
        objects_of_layer(&tc, head),
        0,
        "nothing written after the removal"
    );
    // The name can be used again, by a new family.
    c.create_volume("v", 4 * OS, 1).await.unwrap();
    let v = c.open_volume("v").await.unwrap();
    v.write(0, filled(3, 4096), false).await.unwrap();
    assert_eq!(v.read(0, 4096).await.unwrap(), filled(3, 4096));
}
