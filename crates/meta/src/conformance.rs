//! The conformance suite every [`MetaStore`] backend must pass. Each backend's tests call
//! [`run_all`] on a fresh, empty store (keys under `/conformance/`).

use crate::store::MetaStore;

/// Run every conformance check; panics with a message on the first failure.
pub async fn run_all(m: &dyn MetaStore) {
    get_put(m).await;
    compare_and_swap(m).await;
    compare_and_delete(m).await;
    list_prefix(m).await;
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
