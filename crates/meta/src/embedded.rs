//! The embedded backend: an in-memory ordered map, persisted to one JSON file.
//!
//! Every change rewrites the file through a temporary file, fsync and rename, then fsyncs the
//! directory, so the file is always either the old or the new state (rename is atomic on
//! POSIX filesystems). Metadata changes are rare (volume create/resize/delete, map epochs),
//! so rewriting the whole file is cheap and keeps recovery trivial.

use crate::store::{MetaError, MetaStore, Revision};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const FORMAT_VERSION: u32 = 1;

#[derive(Default, Serialize, Deserialize)]
struct State {
    format_version: u32,
    revision: Revision,
    /// key → (value as UTF-8 JSON text or bytes, revision)
    entries: BTreeMap<String, (Vec<u8>, Revision)>,
}

/// In-process metadata store; `path` = None keeps it in memory only (tests).
pub struct EmbeddedMeta {
    path: Option<PathBuf>,
    state: Mutex<State>,
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
        Ok(Self {
            path: Some(path.to_path_buf()),
            state: Mutex::new(state),
        })
    }

    /// A store that lives in memory only.
    pub fn in_memory() -> Self {
        Self {
            path: None,
            state: Mutex::new(State {
                format_version: FORMAT_VERSION,
                ..State::default()
            }),
        }
    }

    /// Persist `state` atomically (called with the lock held: changes are rare and small).
    fn persist(&self, state: &State) -> Result<(), MetaError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let io = |source| MetaError::Io {
            path: path.display().to_string(),
            source,
        };
        let tmp = path.with_extension("tmp");
        let bytes = serde_json::to_vec(state).expect("metadata state serialises");
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

    /// Apply `change` to the state and persist; on persist failure the change is undone.
    fn mutate<T>(
        &self,
        change: impl FnOnce(&mut State) -> Option<(T, Box<dyn FnOnce(&mut State)>)>,
        unchanged: T,
    ) -> Result<T, MetaError> {
        let mut state = self.state.lock().expect("meta lock");
        match change(&mut state) {
            None => Ok(unchanged),
            Some((result, undo)) => match self.persist(&state) {
                Ok(()) => Ok(result),
                Err(e) => {
                    undo(&mut state);
                    Err(e)
                }
            },
        }
    }
}

#[async_trait]
impl MetaStore for EmbeddedMeta {
    async fn get(&self, key: &str) -> Result<Option<(Vec<u8>, Revision)>, MetaError> {
        let state = self.state.lock().expect("meta lock");
        Ok(state.entries.get(key).cloned())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>, Revision)>, MetaError> {
        let state = self.state.lock().expect("meta lock");
        Ok(state
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
        self.mutate(
            |state| {
                let current = state.entries.get(key).map(|(_, r)| *r).unwrap_or(0);
                if current != expected {
                    return None;
                }
                let previous = state.entries.get(key).cloned();
                let old_revision = state.revision;
                state.revision += 1;
                let rev = state.revision;
                state.entries.insert(key.to_string(), (value, rev));
                let key = key.to_string();
                let undo: Box<dyn FnOnce(&mut State)> = Box::new(move |s: &mut State| {
                    s.revision = old_revision;
                    match previous {
                        Some(p) => s.entries.insert(key, p),
                        None => s.entries.remove(&key),
                    };
                });
                Some((Some(rev), undo))
            },
            None,
        )
    }

    async fn compare_and_delete(&self, key: &str, expected: Revision) -> Result<bool, MetaError> {
        self.mutate(
            |state| {
                let current = state.entries.get(key).map(|(_, r)| *r)?;
                if current != expected {
                    return None;
                }
                let previous = state.entries.remove(key)?;
                let key = key.to_string();
                let undo: Box<dyn FnOnce(&mut State)> = Box::new(move |s: &mut State| {
                    s.entries.insert(key, previous);
                });
                Some((true, undo))
            },
            false,
        )
    }

    async fn put(&self, key: &str, value: Vec<u8>) -> Result<Revision, MetaError> {
        loop {
            let current = self.get(key).await?.map(|(_, r)| r).unwrap_or(0);
            if let Some(rev) = self.compare_and_swap(key, current, value.clone()).await? {
                return Ok(rev);
            }
        }
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
