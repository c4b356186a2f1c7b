//! The KV table object class through three real OSDs on loopback: edits are atomic and
//! conditional, listings page correctly, concurrent updaters lose nothing, every replica
//! holds the same body, and bad input is refused without harming the OSD.

mod common;

use basalt_client::{ClientError, KvCond, KvEdit, KvList};
use basalt_proto::kv::{KvMethod, KvTable, KV_MAX_VALUE};
use basalt_proto::{make_inode, Flags, Header, ObjectId, Opcode, Status};
use bytes::Bytes;
use common::{test_cluster, TestCluster, OBJECT_SIZE};
use std::collections::BTreeMap;

/// An index object of pool 1.
fn table_object(index: u64) -> ObjectId {
    ObjectId::new(make_inode(1, 77, 0), index)
}

fn b(s: impl AsRef<[u8]>) -> Bytes {
    Bytes::copy_from_slice(s.as_ref())
}

fn list_args(start_after: &str, prefix: &str, max_entries: u32) -> KvList {
    KvList {
        start_after: b(start_after),
        prefix: b(prefix),
        max_entries,
        max_bytes: u32::MAX,
    }
}

fn status_of(e: &ClientError) -> Option<Status> {
    match e {
        ClientError::Status { status } => Some(*status),
        _ => None,
    }
}

/// The table body in each OSD's store (bytes up to the body length), with its version.
fn stored_bodies(tc: &TestCluster, obj: ObjectId) -> Vec<(Option<basalt_proto::Version>, Vec<u8>)> {
    tc.osds
        .iter()
        .map(|h| {
            let mut buf = vec![0u8; OBJECT_SIZE as usize];
            h.osd.store.read(obj, 0, &mut buf).expect("read the object");
            let len = KvTable::body_len(&buf, buf.len()).expect("a well-formed table");
            buf.truncate(len);
            (h.osd.store.version(obj), buf)
        })
        .collect()
}

/// Send a raw CALL through the client's retrying path and return its status.
async fn raw_call(tc: &TestCluster, obj: ObjectId, method: u32, args: &[u8]) -> Status {
    let pg = tc.cluster.pg_of(obj).expect("the object has a PG");
    let mut h = Header::request(Opcode::Call, 0, obj);
    h.offset = method;
    match tc.cluster.object_request(pg, h, b(args)).await {
        Ok(reply) => reply.header.status,
        Err(e) => status_of(&e).unwrap_or_else(|| panic!("unexpected error {e}")),
    }
}

/// Goal: updates, gets and lists round-trip, including previous values, prefixes,
/// start_after and pagination over a few thousand keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_get_list_round_trip() {
    let tc = test_cluster(true).await;
    let c = &tc.cluster;
    let obj = table_object(1);

    assert_eq!(
        c.kv_get(obj, vec![b("a")]).await.unwrap(),
        vec![None],
        "an absent object is an empty table"
    );
    let empty = c.kv_stat(obj).await.unwrap();
    assert_eq!(
        (empty.entries, empty.body_bytes),
        (0, 16),
        "an empty table's size"
    );
    let prev = c
        .kv_update(
            obj,
            vec![
                KvEdit::put("a", "1"),
                KvEdit::put("dir/x", "2"),
                KvEdit::put("dir/y", "3"),
            ],
            false,
        )
        .await
        .unwrap();
    assert_eq!(prev, vec![None, None, None]);
    let stat = c.kv_stat(obj).await.unwrap();
    let stored = stored_bodies(&tc, obj);
    assert_eq!(stat.entries, 3);
    assert_eq!(
        stat.body_bytes as usize,
        stored[0].1.len(),
        "Stat is the body's size"
    );
    let prev = c
        .kv_update(
            obj,
            vec![
                KvEdit::put("a", "one"),
                KvEdit::delete("dir/y"),
                KvEdit::put("a", "uno"),
            ],
            true,
        )
        .await
        .unwrap();
    assert_eq!(
        prev,
        vec![Some(b("1")), Some(b("3")), Some(b("1"))],
        "previous values are those before the batch"
    );
    assert_eq!(
        c.kv_get(obj, vec![b("a"), b("dir/y"), b("dir/x")])
            .await
            .unwrap(),
        vec![Some(b("uno")), None, Some(b("2"))],
        "edits apply in order"
    );

    // A few thousand keys, listed in pages with a prefix.
    let expected: BTreeMap<Bytes, Bytes> = (0..3000)
        .map(|i| (b(format!("k/{i:05}")), b(format!("{}", i % 97))))
        .collect();
    let all: Vec<_> = expected.iter().collect();
    for batch in all.chunks(500) {
        let edits = batch
            .iter()
            .map(|(k, v)| KvEdit::put((*k).clone(), (*v).clone()));
        c.kv_update(obj, edits.collect(), false).await.unwrap();
    }
    let mut listed = Vec::new();
    let mut args = list_args("", "k/", 128);
    let mut pages = 0;
    loop {
        let page = c.kv_list(obj, args.clone()).await.unwrap();
        assert!(page.entries.len() <= 128);
        pages += 1;
        assert!(pages <= 3000 / 128 + 1, "pagination does not end");
        let Some((last, _)) = page.entries.last() else {
            assert!(!page.truncated, "an empty page is never truncated");
            break;
        };
        args.start_after = last.clone();
        listed.extend(page.entries.iter().cloned());
        if !page.truncated {
            break;
        }
    }
    assert_eq!(pages, 3000usize.div_ceil(128));
    let expected_list: Vec<(Bytes, Bytes)> = expected.into_iter().collect();
    assert_eq!(
        listed, expected_list,
        "paging returns every key once, ascending"
    );

    let page = c.kv_list(obj, list_args("", "", 1000)).await.unwrap();
    assert_eq!(page.entries[0], (b("a"), b("uno")));
    assert_eq!(page.entries[1], (b("dir/x"), b("2")));
    assert_eq!(page.entries.len(), 1000);
    assert!(page.truncated);
    let page = c.kv_list(obj, list_args("dir/", "dir/", 10)).await.unwrap();
    assert_eq!(page.entries, vec![(b("dir/x"), b("2"))]);
    assert!(!page.truncated);
    let page = c
        .kv_list(obj, list_args("k/02995", "k/", 10))
        .await
        .unwrap();
    let keys: Vec<Bytes> = page.entries.iter().map(|e| e.0.clone()).collect();
    assert_eq!(
        keys,
        vec![b("k/02996"), b("k/02997"), b("k/02998"), b("k/02999")]
    );
    assert!(!page.truncated);
    let mut bytes_capped = list_args("", "k/", 1000);
    bytes_capped.max_bytes = 1;
    let page = c.kv_list(obj, bytes_capped).await.unwrap();
    assert_eq!(page.entries.len(), 1, "at least one entry over max_bytes");
    assert!(page.truncated);

    let bodies = stored_bodies(&tc, obj);
    assert_eq!(bodies[0], bodies[1]);
    assert_eq!(bodies[0], bodies[2]);
}

/// Goal: conditions are all-or-nothing (the first failing edit's index is reported and
/// nothing is applied), Equals compares values, and a retried put-if-absent succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_and_conflicts() {
    let tc = test_cluster(true).await;
    let c = &tc.cluster;
    let obj = table_object(2);
    c.kv_update(obj, vec![KvEdit::put("a", "1").when(KvCond::Absent)], false)
        .await
        .unwrap();

    let err = c
        .kv_update(
            obj,
            vec![
                KvEdit::put("b", "new"),
                KvEdit::put("c", "x").when(KvCond::Absent),
                KvEdit::put("a", "2").when(KvCond::Absent),
                KvEdit::delete("a").when(KvCond::Equals(b("nope"))),
            ],
            false,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::KvConflict { index: 2 }),
        "expected the conflict of edit 2, got {err}"
    );
    assert_eq!(
        c.kv_get(obj, vec![b("a"), b("b"), b("c")]).await.unwrap(),
        vec![Some(b("1")), None, None],
        "nothing of a conflicting batch is applied"
    );

    // Retried put-if-absent with the same value: holds; with another value: conflicts.
    let prev = c
        .kv_update(obj, vec![KvEdit::put("a", "1").when(KvCond::Absent)], false)
        .await
        .unwrap();
    assert_eq!(prev, vec![Some(b("1"))]);
    let err = c
        .kv_update(obj, vec![KvEdit::put("a", "9").when(KvCond::Absent)], false)
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::KvConflict { index: 0 }), "{err}");

    // Equals: compare-and-swap and compare-and-delete.
    let prev = c
        .kv_update(
            obj,
            vec![KvEdit::put("a", "2").when(KvCond::Equals(b("1")))],
            false,
        )
        .await
        .unwrap();
    assert_eq!(prev, vec![Some(b("1"))]);
    let err = c
        .kv_update(
            obj,
            vec![KvEdit::delete("a").when(KvCond::Equals(b("1")))],
            false,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::KvConflict { index: 0 }), "{err}");
    let err = c
        .kv_update(
            obj,
            vec![KvEdit::put("zz", "v").when(KvCond::Equals(b("")))],
            false,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::KvConflict { index: 0 }),
        "an absent key equals no value, not the empty one: {err}"
    );
    c.kv_update(
        obj,
        vec![KvEdit::delete("a").when(KvCond::Equals(b("2")))],
        false,
    )
    .await
    .unwrap();
    assert_eq!(c.kv_get(obj, vec![b("a")]).await.unwrap(), vec![None]);
    let stats = tc.osds.iter().map(|h| {
        h.osd
            .counters
            .kv_conflicts
            .load(std::sync::atomic::Ordering::Relaxed)
    });
    assert_eq!(stats.sum::<u64>(), 4, "conflicts are counted");
}

/// Goal: 64 tasks updating one table concurrently lose no update (each adds its own keys and
/// increments a shared counter by compare-and-swap), and all three stores hold the same body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_updaters_lose_nothing() {
    const TASKS: u64 = 64;
    const KEYS_PER_TASK: u64 = 4;
    /// Bound on one task's compare-and-swap attempts.
    const CAS_ATTEMPTS_MAX: usize = 10_000;
    let tc = test_cluster(true).await;
    let obj = table_object(3);
    // The counter starts at 0, so every increment is a compare-and-swap (Equals). Absent
    // would not do: two tasks putting the same "1" would both succeed (the retry rule).
    tc.cluster
        .kv_update(obj, vec![KvEdit::put("counter", "0")], false)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let c = tc.cluster.clone();
        tasks.push(tokio::spawn(async move {
            for k in 0..KEYS_PER_TASK {
                let key = format!("t{t:02}/{k}");
                c.kv_update(obj, vec![KvEdit::put(key, format!("{t}"))], false)
                    .await
                    .unwrap();
            }
            for _ in 0..CAS_ATTEMPTS_MAX {
                let current = c.kv_get(obj, vec![b("counter")]).await.unwrap().remove(0);
                let current = current.expect("the counter exists");
                let n: u64 = std::str::from_utf8(&current).unwrap().parse().unwrap();
                let edit =
                    KvEdit::put("counter", format!("{}", n + 1)).when(KvCond::Equals(current));
                match c.kv_update(obj, vec![edit], false).await {
                    Ok(_) => return,
                    Err(ClientError::KvConflict { index: 0 }) => continue,
                    Err(e) => panic!("update failed: {e}"),
                }
            }
            panic!("task {t}: no successful compare-and-swap in {CAS_ATTEMPTS_MAX} attempts");
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let c = &tc.cluster;
    assert_eq!(
        c.kv_get(obj, vec![b("counter")]).await.unwrap(),
        vec![Some(b(TASKS.to_string()))],
        "every increment counted once"
    );
    let page = c.kv_list(obj, list_args("", "t", 10_000)).await.unwrap();
    assert_eq!(page.entries.len() as u64, TASKS * KEYS_PER_TASK);
    assert!(!page.truncated);
    c.flush().await.unwrap();

    let bodies = stored_bodies(&tc, obj);
    assert!(bodies[0].0.is_some());
    assert_eq!(
        bodies[0], bodies[1],
        "osd.0 and osd.1 hold different tables"
    );
    assert_eq!(
        bodies[0], bodies[2],
        "osd.0 and osd.2 hold different tables"
    );
    let table = KvTable::decode(&bodies[0].1).unwrap();
    assert_eq!(table.entries.len() as u64, TASKS * KEYS_PER_TASK + 1);
}

/// Goal: an update that would outgrow the object answers NoSpace and leaves the old table
/// intact; a value over the limit is refused by the client before it is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_table_is_refused() {
    let tc = test_cluster(true).await;
    let c = &tc.cluster;
    let obj = table_object(4);
    let big = Bytes::from(vec![7u8; 40 << 10]);
    c.kv_update(obj, vec![KvEdit::put("a", big.clone())], false)
        .await
        .unwrap();
    let err = c
        .kv_update(
            obj,
            vec![KvEdit::delete("zzz"), KvEdit::put("b", vec![8u8; 30 << 10])],
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(status_of(&err), Some(Status::NoSpace), "{err}");
    assert_eq!(
        c.kv_get(obj, vec![b("a"), b("b")]).await.unwrap(),
        vec![Some(big), None]
    );
    let err = c
        .kv_update(
            obj,
            vec![KvEdit::put("c", vec![0u8; KV_MAX_VALUE + 1])],
            false,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Invalid { .. }), "{err}");
    let bodies = stored_bodies(&tc, obj);
    assert_eq!(bodies[0], bodies[1]);
    assert_eq!(bodies[0], bodies[2]);
}

/// Goal: malformed arguments, unknown methods, an empty page size and replica-flagged calls
/// answer Invalid; a corrupt table answers Io and is not rewritten; the OSD keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused() {
    let tc = test_cluster(true).await;
    let c = &tc.cluster;
    let obj = table_object(5);
    c.kv_update(obj, vec![KvEdit::put("a", "1")], false)
        .await
        .unwrap();

    for method in [KvMethod::Update, KvMethod::Get, KvMethod::List] {
        for garbage in [
            &b""[..],
            &b"\xff\xff\xff\xff"[..],
            &b"\x01\x00\x00\x00\x00\x00"[..],
        ] {
            let status = raw_call(&tc, obj, method as u32, garbage).await;
            assert_eq!(status, Status::Invalid, "{method:?} with {garbage:?}");
        }
    }
    for garbage in [&b"\x00"[..], &b"\x01\x00\x00\x00"[..]] {
        let status = raw_call(&tc, obj, KvMethod::Stat as u32, garbage).await;
        assert_eq!(
            status,
            Status::Invalid,
            "Stat takes no arguments: {garbage:?}"
        );
    }
    assert_eq!(raw_call(&tc, obj, 99, b"").await, Status::Invalid);
    let empty_page = list_args("", "", 0).encode();
    assert_eq!(
        raw_call(&tc, obj, KvMethod::List as u32, &empty_page).await,
        Status::Invalid
    );
    // An update whose previous values would not fit in one reply.
    let huge = b(vec![1u8; KV_MAX_VALUE]);
    c.kv_update(obj, vec![KvEdit::put("h", huge.slice(..60_000))], false)
        .await
        .unwrap();
    let err = c.kv_get(obj, vec![b("h"); 200]).await.unwrap_err();
    assert_eq!(status_of(&err), Some(Status::Invalid), "{err}");

    // A CALL flagged as coming from a primary is refused by every OSD.
    let pg = c.pg_of(obj).unwrap();
    for osd in 0..3 {
        let conn = c.connection(osd).await.unwrap();
        let mut h = Header::request(Opcode::Call, 0, obj);
        h.offset = KvMethod::Get as u32;
        h.flags = Flags(Flags::REPLICA);
        h.pg = pg;
        h.map_epoch = c.map().epoch;
        let args = basalt_proto::kv::KvGet { keys: vec![b("a")] }.encode();
        let reply = conn.call(h, args).await.unwrap();
        assert_eq!(reply.header.status, Status::Invalid, "osd.{osd}");
    }

    // A body that fails its checksum is never served nor rewritten.
    let corrupt = table_object(6);
    let mut body = KvTable::default();
    body.entries.insert(b("k"), b("v"));
    let mut bytes = body.encode().to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    c.write_object(corrupt, 0, b(&bytes), false).await.unwrap();
    let err = c.kv_get(corrupt, vec![b("k")]).await.unwrap_err();
    assert_eq!(status_of(&err), Some(Status::Io), "{err}");
    let err = c
        .kv_update(corrupt, vec![KvEdit::put("k", "w")], false)
        .await
        .unwrap_err();
    assert_eq!(status_of(&err), Some(Status::Io), "{err}");
    let err = c.kv_list(corrupt, list_args("", "", 10)).await.unwrap_err();
    assert_eq!(status_of(&err), Some(Status::Io), "{err}");
    let after = c.read_object(corrupt, 0, bytes.len() as u32).await.unwrap();
    assert_eq!(&after[..], &bytes[..], "a corrupt table is left as it was");

    // Still serving.
    assert_eq!(
        c.kv_get(obj, vec![b("a")]).await.unwrap(),
        vec![Some(b("1"))]
    );
}

/// Goal: plain object data round-trips through write_object/read_object/delete_object,
/// ranges past the object are refused, and an object of an unknown pool is an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_objects_round_trip() {
    let tc = test_cluster(true).await;
    let c = &tc.cluster;
    let obj = ObjectId::new(make_inode(1, 78, 0), 0);
    let data = b((0..10_000u32).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    c.write_object(obj, 100, data.clone(), true).await.unwrap();
    let read = c.read_object(obj, 0, 10_100).await.unwrap();
    assert!(read[..100].iter().all(|&x| x == 0));
    assert_eq!(&read[100..], &data[..]);
    let err = c
        .write_object(obj, OBJECT_SIZE - 10, b("more than ten bytes"), false)
        .await
        .unwrap_err();
    assert_eq!(status_of(&err), Some(Status::Invalid), "{err}");
    let err = c.read_object(obj, OBJECT_SIZE, 1).await.unwrap_err();
    assert_eq!(status_of(&err), Some(Status::Invalid), "{err}");

    c.delete_object(obj).await.unwrap();
    let read = c.read_object(obj, 0, 10_100).await.unwrap();
    assert!(
        read.iter().all(|&x| x == 0),
        "a deleted object reads as zeros"
    );
    for h in &tc.osds {
        assert_eq!(
            h.osd.store.version(obj),
            None,
            "osd.{} still holds it",
            h.osd.id
        );
    }
    c.delete_object(obj).await.unwrap();

    let unknown = ObjectId::new(make_inode(9, 1, 0), 0);
    let err = c.read_object(unknown, 0, 1).await.unwrap_err();
    assert!(matches!(err, ClientError::Map(_)), "{err}");
    let err = c.kv_get(unknown, vec![b("a")]).await.unwrap_err();
    assert!(matches!(err, ClientError::Map(_)), "{err}");
}
