//! The conformance suite every [`MetaStore`] backend must pass. Each backend's tests call
//! [`run_all`] on a fresh, empty store (keys under `/conformance/`), and [`cas_race`] from a
//! multi-threaded runtime.
//!
//! Every wait is bounded: watch events must arrive within [`EVENT_WAIT_MS`], and a lease
//! must end within [`LEASE_END_WAIT_MS`] of its last keep-alive.

// A test suite compiled into the library so every backend's tests can run it: a failed
// unwrap is a failed check, reported by the panic like any assert.
#![allow(clippy::unwrap_used)]

use crate::store::{MetaError, MetaStore, WatchEvent, WatchReceiver};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Longest wait for one watch event.
pub const EVENT_WAIT_MS: u64 = 5_000;
/// Longest wait, after the last keep-alive, for a leased key to vanish. etcd rounds short
/// TTLs up to its minimum (about 2 s) and checks expiry every 500 ms.
pub const LEASE_END_WAIT_MS: u64 = 6_000;
/// TTL of the leases the suite grants.
const LEASE_TTL_SECS: u64 = 2;
/// Rounds of the compare-and-swap race.
pub const CAS_RACE_ROUNDS: usize = 20;

/// Run every conformance check; panics with a message on the first failure.
pub async fn run_all(m: &dyn MetaStore) {
    get_put(m).await;
    compare_and_swap(m).await;
    compare_and_delete(m).await;
    list_prefix(m).await;
    watch_live_and_replay(m).await;
    lease_expiry(m).await;
    lease_revoke(m).await;
    create_with_lease(m).await;
}

/// Goal: `create_with_lease` creates only an absent key, and the key goes with its lease
/// (what monitor election relies on).
async fn create_with_lease(m: &dyn MetaStore) {
    let key = "/conformance/election/leader";
    let a = m.grant_lease(60).await.unwrap();
    let b = m.grant_lease(60).await.unwrap();
    assert!(m
        .create_with_lease(key, b"a".to_vec(), a)
        .await
        .unwrap()
        .is_some());
    assert!(m
        .create_with_lease(key, b"b".to_vec(), b)
        .await
        .unwrap()
        .is_none());
    assert_eq!(m.get(key).await.unwrap().unwrap().0, b"a");
    m.revoke_lease(a).await.unwrap();
    assert!(m.get(key).await.unwrap().is_none());
    assert!(m
        .create_with_lease(key, b"b".to_vec(), b)
        .await
        .unwrap()
        .is_some());
    assert_eq!(m.get(key).await.unwrap().unwrap().0, b"b");
    m.revoke_lease(b).await.unwrap();
    assert!(matches!(
        m.create_with_lease(key, b"c".to_vec(), b).await,
        Err(MetaError::LeaseNotFound { .. })
    ));
}

/// The next watch event, waiting at most [`EVENT_WAIT_MS`].
pub async fn next_event(rx: &mut WatchReceiver) -> WatchEvent {
    match tokio::time::timeout(Duration::from_millis(EVENT_WAIT_MS), rx.recv()).await {
        Ok(Some(Ok(ev))) => ev,
        Ok(Some(Err(e))) => panic!("watch failed: {e}"),
        Ok(None) => panic!("watch ended"),
        Err(_) => panic!("no watch event within {EVENT_WAIT_MS} ms"),
    }
}

/// Goal: a watch sees puts and deletes under its prefix only, in order, with the revisions
/// the writes returned; a watch from a past revision replays the same events.
async fn watch_live_and_replay(m: &dyn MetaStore) {
    let prefix = "/conformance/w/";
    let before = m.put("/conformance/w/a", b"0".to_vec()).await.unwrap();
    let mut live = m.watch_prefix(prefix, 0).await.unwrap();
    let rb = m.put("/conformance/w/b", b"1".to_vec()).await.unwrap();
    m.put("/conformance/wx", b"outside".to_vec()).await.unwrap();
    let ra = m.put("/conformance/w/a", b"2".to_vec()).await.unwrap();
    assert!(m.compare_and_delete("/conformance/w/b", rb).await.unwrap());
    let expected_prefix = [
        WatchEvent::Put {
            key: "/conformance/w/b".into(),
            value: b"1".to_vec(),
            revision: rb,
        },
        WatchEvent::Put {
            key: "/conformance/w/a".into(),
            value: b"2".to_vec(),
            revision: ra,
        },
    ];
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(next_event(&mut live).await);
    }
    assert_eq!(seen[..2], expected_prefix, "live events");
    match &seen[2] {
        WatchEvent::Delete { key, revision } => {
            assert_eq!(key, "/conformance/w/b");
            assert!(*revision > ra, "a delete gets a new revision");
        }
        other => panic!("expected the delete of /conformance/w/b, got {other:?}"),
    }
    assert!(before < rb);

    let mut replay = m.watch_prefix(prefix, rb).await.unwrap();
    let mut replayed = Vec::new();
    for _ in 0..3 {
        replayed.push(next_event(&mut replay).await);
    }
    assert_eq!(
        replayed, seen,
        "a watch from revision {rb} replays the same events"
    );
    // Both watches stay live after the replay.
    let rc = m.put("/conformance/w/c", b"3".to_vec()).await.unwrap();
    for rx in [&mut live, &mut replay] {
        assert_eq!(next_event(rx).await.revision(), rc);
    }
}

/// Poll `key` until it is absent, at most [`LEASE_END_WAIT_MS`]; returns the time it took.
async fn wait_absent(m: &dyn MetaStore, key: &str) -> Duration {
    let start = Instant::now();
    // Loop bound: LEASE_END_WAIT_MS of 50 ms polls.
    'poll: loop {
        if m.get(key).await.unwrap().is_none() {
            break 'poll;
        }
        assert!(
            start.elapsed() < Duration::from_millis(LEASE_END_WAIT_MS),
            "{key} still present {LEASE_END_WAIT_MS} ms after its lease's last keep-alive"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

/// Goal: a leased key lives while its lease is kept alive (past its TTL), then vanishes
/// within a bound once keep-alives stop, with a delete event; the lease is then gone.
async fn lease_expiry(m: &dyn MetaStore) {
    let key = "/conformance/lease/expiring";
    let lease = m.grant_lease(LEASE_TTL_SECS).await.unwrap();
    let mut rx = m.watch_prefix("/conformance/lease/", 0).await.unwrap();
    let rev = m
        .put_with_lease(key, b"alive".to_vec(), lease)
        .await
        .unwrap();
    assert_eq!(next_event(&mut rx).await.revision(), rev);
    // Keep it alive for longer than the TTL.
    let keep_until =
        Instant::now() + Duration::from_secs(LEASE_TTL_SECS) + Duration::from_millis(500);
    // Loop bound: TTL + 500 ms of 500 ms rounds.
    while Instant::now() < keep_until {
        let ttl = m.keep_alive(lease).await.unwrap();
        assert!(
            ttl >= LEASE_TTL_SECS,
            "keep-alive returns the full TTL, got {ttl}"
        );
        assert!(
            m.get(key).await.unwrap().is_some(),
            "key vanished while kept alive"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    wait_absent(m, key).await;
    match next_event(&mut rx).await {
        WatchEvent::Delete { key: k, revision } => {
            assert_eq!(k, key);
            assert!(revision > rev);
        }
        other => panic!("expected the lease expiry delete, got {other:?}"),
    }
    assert!(matches!(
        m.keep_alive(lease).await,
        Err(MetaError::LeaseNotFound { .. })
    ));
    assert!(matches!(
        m.put_with_lease(key, b"late".to_vec(), lease).await,
        Err(MetaError::LeaseNotFound { .. })
    ));
}

/// Goal: revoking a lease deletes its keys at once, but not a key a plain put detached from
/// it; revoking twice is harmless.
async fn lease_revoke(m: &dyn MetaStore) {
    let lease = m.grant_lease(60).await.unwrap();
    m.put_with_lease("/conformance/revoke/a", b"1".to_vec(), lease)
        .await
        .unwrap();
    m.put_with_lease("/conformance/revoke/b", b"1".to_vec(), lease)
        .await
        .unwrap();
    m.put("/conformance/revoke/b", b"plain".to_vec())
        .await
        .unwrap();
    m.revoke_lease(lease).await.unwrap();
    assert!(m.get("/conformance/revoke/a").await.unwrap().is_none());
    assert_eq!(
        m.get("/conformance/revoke/b").await.unwrap().unwrap().0,
        b"plain"
    );
    m.revoke_lease(lease).await.unwrap();
}

/// Goal: two tasks racing compare-and-swap from the same revision of one key: exactly one
/// wins each round, and the key holds the winner's value at the winner's revision.
pub async fn cas_race(m: Arc<dyn MetaStore>) {
    let key = "/conformance/race";
    let mut rev = m.put(key, b"start".to_vec()).await.unwrap();
    let mut wins = [0usize; 2];
    for round in 0..CAS_RACE_ROUNDS {
        let tasks: Vec<_> = (0..2u8)
            .map(|who| {
                let m = m.clone();
                tokio::spawn(
                    async move { m.compare_and_swap(key, rev, vec![who, round as u8]).await },
                )
            })
            .collect();
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.expect("race task").unwrap());
        }
        let winners: Vec<usize> = (0..2).filter(|i| results[*i].is_some()).collect();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one winner, got {results:?}"
        );
        let who = winners[0];
        wins[who] += 1;
        let new_rev = results[who].unwrap();
        let (value, current) = m.get(key).await.unwrap().unwrap();
        assert_eq!((value, current), (vec![who as u8, round as u8], new_rev));
        rev = new_rev;
    }
    assert_eq!(wins[0] + wins[1], CAS_RACE_ROUNDS);
}

async fn get_put(m: &dyn MetaStore) {
    assert!(m.get("/conformance/missing").await.unwrap().is_none());
    let r1 = m.put("/conformance/k", b"v1".to_vec()).await.unwrap();
    let (v, r) = m.get("/conformance/k").await.unwrap().unwrap();
    assert_eq!((v.as_slice(), r), (&b"v1"[..], r1));
    let r2 = m.put("/conformance/k", b"v2".to_vec()).await.unwrap();
    assert!(r2 > r1, "revisions grow");
}

async fn compare_and_swap(m: &dyn MetaStore) {
    let key = "/conformance/cas";
    let r1 = m.compare_and_swap(key, 0, b"a".to_vec()).await.unwrap();
    let r1 = r1.expect("create when absent");
    assert!(
        m.compare_and_swap(key, 0, b"b".to_vec())
            .await
            .unwrap()
            .is_none(),
        "create fails when present"
    );
    assert!(m
        .compare_and_swap(key, r1 + 1000, b"b".to_vec())
        .await
        .unwrap()
        .is_none());
    let r2 = m.compare_and_swap(key, r1, b"c".to_vec()).await.unwrap();
    assert!(r2.expect("swap at the right revision") > r1);
    assert_eq!(m.get(key).await.unwrap().unwrap().0, b"c");
}

async fn compare_and_delete(m: &dyn MetaStore) {
    let key = "/conformance/del";
    let r = m.put(key, b"x".to_vec()).await.unwrap();
    assert!(!m.compare_and_delete(key, r + 1).await.unwrap());
    assert!(m.compare_and_delete(key, r).await.unwrap());
    assert!(m.get(key).await.unwrap().is_none());
    assert!(!m.compare_and_delete(key, r).await.unwrap(), "already gone");
}

async fn list_prefix(m: &dyn MetaStore) {
    for k in [
        "/conformance/l/b",
        "/conformance/l/a",
        "/conformance/lx",
        "/conformance/l/c",
    ] {
        m.put(k, k.as_bytes().to_vec()).await.unwrap();
    }
    let keys: Vec<String> = m
        .list("/conformance/l/")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _, _)| k)
        .collect();
    assert_eq!(
        keys,
        vec!["/conformance/l/a", "/conformance/l/b", "/conformance/l/c"]
    );
}
