//! The embedded backend: an in-memory ordered map, persisted to one JSON file.
//!
//! Every change rewrites the file through a temporary file, fsync and rename, then fsyncs the
//! directory, so the file is always either the old or the new state (rename is atomic on
//! POSIX filesystems). Metadata changes are rare (volume create/resize/delete, map epochs),
//! so rewriting the whole file is cheap and keeps recovery trivial.
//!
//! Watches and leases live in memory only. Keys attached to a lease are never written to the
//! file, so they are gone after a restart (their lease could not have survived it either);
//! the revision counter is persisted, so revisions keep growing across restarts. Watch
//! history covers the last [`WATCH_HISTORY_EVENTS`] events since the store was opened.
//! Lease expiry runs as a Tokio task, so `grant_lease` must be called inside a Tokio runtime.

use crate::store::{
    LeaseId, MetaError, MetaStore, Revision, WatchEvent, WatchReceiver, WATCH_QUEUE_EVENTS,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

const FORMAT_VERSION: u32 = 1;

/// Events kept in memory for watches that start at a past revision.
pub const WATCH_HISTORY_EVENTS: usize = 1000;

/// Delay before a lease expiry whose file write failed is tried again.
const LEASE_EXPIRY_RETRY_MS: u64 = 1000;

// A replay must fit in a fresh watch queue.
const _: () = assert!(WATCH_HISTORY_EVENTS <= WATCH_QUEUE_EVENTS);

/// The persisted part of the store.
#[derive(Default, Serialize, Deserialize)]
struct State {
    format_version: u32,
    revision: Revision,
    /// key → (value as UTF-8 JSON text or bytes, revision)
    entries: BTreeMap<String, (Vec<u8>, Revision)>,
}

/// What is written to the file: `State` without the leased keys.
#[derive(Serialize)]
struct PersistedView<'a> {
    format_version: u32,
    revision: Revision,
    entries: BTreeMap<&'a str, &'a (Vec<u8>, Revision)>,
}

/// A live lease: its TTL and when it ends unless renewed.
struct Lease {
    ttl: Duration,
    deadline: Instant,
}

/// A registered watch: events for keys under `prefix` at revisions >= `from` go to `tx`.
struct Watcher {
    prefix: String,
    from: Revision,
    tx: mpsc::Sender<Result<WatchEvent, MetaError>>,
}

/// Everything behind the store's lock.
struct Core {
    state: State,
    /// key → lease it is attached to (such keys are never persisted).
    leased: HashMap<String, LeaseId>,
    leases: HashMap<LeaseId, Lease>,
    next_lease: LeaseId,
    /// The most recent events, oldest first, for watches that start in the past.
    history: VecDeque<WatchEvent>,
    /// Oldest revision from which `history` is complete.
    history_from: Revision,
    watchers: Vec<Watcher>,
}

/// One change applied by [`Inner::commit`].
enum Change {
    Put {
        key: String,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    },
    Delete {
        key: String,
    },
}

struct Inner {
    path: Option<PathBuf>,
    core: Mutex<Core>,
}

/// In-process metadata store; `path` = None keeps it in memory only (tests).
pub struct EmbeddedMeta {
    inner: Arc<Inner>,
}

impl EmbeddedMeta {
    /// Open (or create) the store persisted at `path`.
    pub fn open(path: &Path) -> Result<Self, MetaError> {
        let state = match fs::read(path) {
            Ok(bytes) => {
                let state: State =
                    serde_json::from_slice(&bytes).map_err(|e| MetaError::Corrupt {
                        path: path.display().to_string(),
                        reason: e.to_string(),
                    })?;
                if state.format_version != FORMAT_VERSION {
                    return Err(MetaError::Corrupt {
                        path: path.display().to_string(),
                        reason: format!("unsupported format version {}", state.format_version),
                    });
                }
                if let Some((key, (_, rev))) =
                    state.entries.iter().find(|(_, (_, r))| *r > state.revision)
                {
                    return Err(MetaError::Corrupt {
                        path: path.display().to_string(),
                        reason: format!(
                            "key {key} has revision {rev} above the store revision {}",
                            state.revision
                        ),
                    });
                }
                state
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State {
                format_version: FORMAT_VERSION,
                ..State::default()
            },
            Err(source) => {
                return Err(MetaError::Io {
                    path: path.display().to_string(),
                    source,
                })
            }
        };
        Ok(Self::with_state(Some(path.to_path_buf()), state))
    }

    /// A store that lives in memory only.
    pub fn in_memory() -> Self {
        Self::with_state(
            None,
            State {
                format_version: FORMAT_VERSION,
                ..State::default()
            },
        )
    }

    fn with_state(path: Option<PathBuf>, state: State) -> Self {
        let history_from = state.revision + 1;
        Self {
            inner: Arc::new(Inner {
                path,
                core: Mutex::new(Core {
                    state,
                    leased: HashMap::new(),
                    leases: HashMap::new(),
                    next_lease: 1,
                    history: VecDeque::new(),
                    history_from,
                    watchers: Vec::new(),
                }),
            }),
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Core> {
        self.core.lock().expect("meta lock")
    }

    /// Persist the non-leased part of `core` atomically (called with the lock held: changes
    /// are rare and small).
    fn persist(&self, core: &Core) -> Result<(), MetaError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let io = |source| MetaError::Io {
            path: path.display().to_string(),
            source,
        };
        let view = PersistedView {
            format_version: core.state.format_version,
            revision: core.state.revision,
            entries: core
                .state
                .entries
                .iter()
                .filter(|(k, _)| !core.leased.contains_key(*k))
                .map(|(k, v)| (k.as_str(), v))
                .collect(),
        };
        let tmp = path.with_extension("tmp");
        let bytes = serde_json::to_vec(&view).expect("metadata state serialises");
        let mut f = File::create(&tmp).map_err(io)?;
        f.write_all(&bytes).map_err(io)?;
        f.sync_all().map_err(io)?;
        fs::rename(&tmp, path).map_err(io)?;
        if let Some(dir) = path.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        }
        Ok(())
    }

    /// Apply `changes` at one new revision, persist, then tell the watchers. On a persist
    /// failure every change is undone and nothing is published.
    fn commit(&self, core: &mut Core, changes: Vec<Change>) -> Result<Revision, MetaError> {
        let old_revision = core.state.revision;
        let rev = old_revision + 1;
        type Undo = (String, Option<(Vec<u8>, Revision)>, Option<LeaseId>);
        let mut undo: Vec<Undo> = Vec::with_capacity(changes.len());
        let mut events = Vec::with_capacity(changes.len());
        for change in changes {
            match change {
                Change::Put { key, value, lease } => {
                    let entry = core.state.entries.insert(key.clone(), (value.clone(), rev));
                    let attached = match lease {
                        Some(l) => core.leased.insert(key.clone(), l),
                        None => core.leased.remove(&key),
                    };
                    undo.push((key.clone(), entry, attached));
                    events.push(WatchEvent::Put {
                        key,
                        value,
                        revision: rev,
                    });
                }
                Change::Delete { key } => {
                    let entry = core.state.entries.remove(&key);
                    let attached = core.leased.remove(&key);
                    undo.push((key.clone(), entry, attached));
                    events.push(WatchEvent::Delete { key, revision: rev });
                }
            }
        }
        core.state.revision = rev;
        if let Err(e) = self.persist(core) {
            core.state.revision = old_revision;
            for (key, entry, attached) in undo.into_iter().rev() {
                match entry {
                    Some(entry) => core.state.entries.insert(key.clone(), entry),
                    None => core.state.entries.remove(&key),
                };
                match attached {
                    Some(l) => core.leased.insert(key, l),
                    None => core.leased.remove(&key),
                };
            }
            return Err(e);
        }
        core.publish(events);
        Ok(rev)
    }

    /// End `lease` and delete its keys at one revision.
    fn end_lease(&self, core: &mut Core, lease: LeaseId) -> Result<(), MetaError> {
        let mut keys: Vec<String> = core
            .leased
            .iter()
            .filter(|(_, l)| **l == lease)
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        if !keys.is_empty() {
            let changes = keys.into_iter().map(|key| Change::Delete { key }).collect();
            self.commit(core, changes)?;
        }
        core.leases.remove(&lease);
        Ok(())
    }
}

impl Core {
    /// Record `events` in the history and hand them to every matching watcher. A watcher
    /// whose queue is full or closed is dropped, which ends its stream.
    fn publish(&mut self, events: Vec<WatchEvent>) {
        self.watchers.retain(|w| {
            events
                .iter()
                .filter(|ev| ev.revision() >= w.from && ev.key().starts_with(&w.prefix))
                .all(|ev| w.tx.try_send(Ok(ev.clone())).is_ok())
        });
        self.history.extend(events);
        // Trim whole revisions so the history never holds half of one.
        while self.history.len() > WATCH_HISTORY_EVENTS {
            let Some(oldest) = self.history.pop_front() else {
                break;
            };
            self.history_from = oldest.revision() + 1;
            while self
                .history
                .front()
                .is_some_and(|ev| ev.revision() < self.history_from)
            {
                self.history.pop_front();
            }
        }
    }

    /// The lease if it is still live.
    fn live_lease(&mut self, lease: LeaseId) -> Result<&mut Lease, MetaError> {
        match self.leases.get_mut(&lease) {
            Some(l) if l.deadline > Instant::now() => Ok(l),
            _ => Err(MetaError::LeaseNotFound { lease }),
        }
    }
}

/// Background task of one lease: sleeps until its deadline, then ends it unless it was
/// renewed (then sleeps again) or revoked. Exits when the lease or the store is gone.
async fn expire_lease(inner: Weak<Inner>, lease: LeaseId) {
    // Loop bound: each round either ends the lease or waits for a deadline that a
    // keep-alive moved; it stops with the lease or the store.
    'expiry: loop {
        let deadline = {
            let Some(store) = inner.upgrade() else {
                break 'expiry;
            };
            let core = store.lock();
            match core.leases.get(&lease) {
                Some(l) => l.deadline,
                None => break 'expiry,
            }
        };
        tokio::time::sleep_until(deadline).await;
        let Some(store) = inner.upgrade() else {
            break 'expiry;
        };
        let mut core = store.lock();
        match core.leases.get(&lease) {
            None => break 'expiry,
            Some(l) if l.deadline > Instant::now() => continue 'expiry,
            Some(_) => {}
        }
        if store.end_lease(&mut core, lease).is_err() {
            // The file could not be written: keep the lease and try again shortly.
            if let Some(l) = core.leases.get_mut(&lease) {
                l.deadline = Instant::now() + Duration::from_millis(LEASE_EXPIRY_RETRY_MS);
            }
            continue 'expiry;
        }
        break 'expiry;
    }
}

#[async_trait]
impl MetaStore for EmbeddedMeta {
    async fn get(&self, key: &str) -> Result<Option<(Vec<u8>, Revision)>, MetaError> {
        let core = self.inner.lock();
        Ok(core.state.entries.get(key).cloned())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>, Revision)>, MetaError> {
        let core = self.inner.lock();
        Ok(core
            .state
            .entries
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, (v, r))| (k.clone(), v.clone(), *r))
            .collect())
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Revision,
        value: Vec<u8>,
    ) -> Result<Option<Revision>, MetaError> {
        let mut core = self.inner.lock();
        let current = core.state.entries.get(key).map(|(_, r)| *r).unwrap_or(0);
        if current != expected {
            return Ok(None);
        }
        let change = Change::Put {
            key: key.to_string(),
            value,
            lease: None,
        };
        self.inner.commit(&mut core, vec![change]).map(Some)
    }

    async fn compare_and_delete(&self, key: &str, expected: Revision) -> Result<bool, MetaError> {
        let mut core = self.inner.lock();
        match core.state.entries.get(key) {
            Some((_, r)) if *r == expected => {}
            _ => return Ok(false),
        }
        let change = Change::Delete {
            key: key.to_string(),
        };
        self.inner.commit(&mut core, vec![change])?;
        Ok(true)
    }

    async fn put(&self, key: &str, value: Vec<u8>) -> Result<Revision, MetaError> {
        let mut core = self.inner.lock();
        let change = Change::Put {
            key: key.to_string(),
            value,
            lease: None,
        };
        self.inner.commit(&mut core, vec![change])
    }

    async fn watch_prefix(
        &self,
        prefix: &str,
        from_revision: Revision,
    ) -> Result<WatchReceiver, MetaError> {
        let (tx, rx) = mpsc::channel(WATCH_QUEUE_EVENTS);
        let mut core = self.inner.lock();
        let from = if from_revision == 0 {
            core.state.revision + 1
        } else {
            from_revision
        };
        if from < core.history_from {
            return Err(MetaError::Compacted {
                requested: from,
                oldest: core.history_from,
            });
        }
        // The history is at most WATCH_QUEUE_EVENTS long, so the replay fits the new queue.
        for ev in core
            .history
            .iter()
            .filter(|ev| ev.revision() >= from && ev.key().starts_with(prefix))
        {
            tx.try_send(Ok(ev.clone()))
                .expect("watch history fits a fresh watch queue");
        }
        core.watchers.push(Watcher {
            prefix: prefix.to_string(),
            from,
            tx,
        });
        Ok(rx)
    }

    async fn grant_lease(&self, ttl_secs: u64) -> Result<LeaseId, MetaError> {
        let ttl = Duration::from_secs(ttl_secs.max(1));
        let lease = {
            let mut core = self.inner.lock();
            let lease = core.next_lease;
            core.next_lease += 1;
            core.leases.insert(
                lease,
                Lease {
                    ttl,
                    deadline: Instant::now() + ttl,
                },
            );
            lease
        };
        tokio::spawn(expire_lease(Arc::downgrade(&self.inner), lease));
        Ok(lease)
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<u64, MetaError> {
        let mut core = self.inner.lock();
        let l = core.live_lease(lease)?;
        l.deadline = Instant::now() + l.ttl;
        Ok(l.ttl.as_secs())
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), MetaError> {
        let mut core = self.inner.lock();
        if !core.leases.contains_key(&lease) {
            return Ok(());
        }
        self.inner.end_lease(&mut core, lease)
    }

    async fn create_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<Option<Revision>, MetaError> {
        let mut core = self.inner.lock();
        core.live_lease(lease)?;
        if core.state.entries.contains_key(key) {
            return Ok(None);
        }
        let change = Change::Put {
            key: key.to_string(),
            value,
            lease: Some(lease),
        };
        self.inner.commit(&mut core, vec![change]).map(Some)
    }

    async fn put_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<Revision, MetaError> {
        let mut core = self.inner.lock();
        core.live_lease(lease)?;
        let change = Change::Put {
            key: key.to_string(),
            value,
            lease: Some(lease),
        };
        self.inner.commit(&mut core, vec![change])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;

    /// Goal: the embedded backend passes the shared conformance suite in memory.
    #[tokio::test]
    async fn conformance_in_memory() {
        conformance::run_all(&EmbeddedMeta::in_memory()).await;
    }

    /// Goal: the persisted backend passes the suite and keeps every change across reopen.
    #[tokio::test]
    async fn persists_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.json");
        {
            let m = EmbeddedMeta::open(&path).unwrap();
            conformance::run_all(&m).await;
            m.put("/keep/a", b"1".to_vec()).await.unwrap();
        }
        let m = EmbeddedMeta::open(&path).unwrap();
        let (v, rev) = m.get("/keep/a").await.unwrap().unwrap();
        assert_eq!(v, b"1");
        // Revisions keep growing after a reopen.
        let rev2 = m.put("/keep/a", b"2".to_vec()).await.unwrap();
        assert!(rev2 > rev);
    }

    /// Goal: two tasks racing compare-and-swap on one key: exactly one wins per round.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cas_race() {
        conformance::cas_race(std::sync::Arc::new(EmbeddedMeta::in_memory())).await;
    }

    /// Goal: leased keys are not persisted (their lease cannot outlive the process), while
    /// plain keys and the revision counter are.
    #[tokio::test]
    async fn leased_keys_do_not_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.json");
        let leased_rev = {
            let m = EmbeddedMeta::open(&path).unwrap();
            m.put("/plain", b"p".to_vec()).await.unwrap();
            let lease = m.grant_lease(60).await.unwrap();
            m.put_with_lease("/leased", b"l".to_vec(), lease)
                .await
                .unwrap()
        };
        let m = EmbeddedMeta::open(&path).unwrap();
        assert!(m.get("/leased").await.unwrap().is_none());
        assert_eq!(m.get("/plain").await.unwrap().unwrap().0, b"p");
        assert!(m.put("/plain", b"q".to_vec()).await.unwrap() > leased_rev);
    }

    /// Goal: a watch from before the kept history fails with Compacted instead of silently
    /// skipping events; one from the oldest kept revision works.
    #[tokio::test]
    async fn watch_beyond_history_is_compacted() {
        let m = EmbeddedMeta::in_memory();
        let extra = 10;
        for i in 0..WATCH_HISTORY_EVENTS + extra {
            m.put("/h", i.to_string().into_bytes()).await.unwrap();
        }
        let oldest = (extra + 1) as Revision;
        assert!(matches!(
            m.watch_prefix("/", 1).await,
            Err(MetaError::Compacted { requested: 1, oldest: o }) if o == oldest
        ));
        let mut rx = m.watch_prefix("/", oldest).await.unwrap();
        assert_eq!(conformance::next_event(&mut rx).await.revision(), oldest);
    }

    /// Goal: a damaged file is reported as corrupt, not silently reset.
    #[test]
    fn corrupt_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.json");
        std::fs::write(&path, b"{not json").unwrap();
        assert!(matches!(
            EmbeddedMeta::open(&path),
            Err(MetaError::Corrupt { .. })
        ));
    }
}
