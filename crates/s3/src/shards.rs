//! The range-partitioned tables of each shard of a bucket's index: routing a key to the
//! table that holds it, checking that table's fence in the same request, and splitting a
//! table that is full. See docs/design.md, "Shard splitting", for the protocol and why each
//! step is safe against racing gateways and crashes.

use crate::buckets::BucketRecord;
use crate::index::{shard_of, table_object, IndexError, Table};
use basalt_client::{ClientError, Cluster};
use basalt_proto::kv::{KvCond, KvEdit, KvList};
use basalt_proto::{InodeId, ObjectId, Status};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The key of every index table's fence record (0xFF never occurs in an object key).
pub const FENCE: &[u8] = b"\xff\xffbasalt:fence";
/// The root's counter of leaf numbers.
const NEXT_LEAF: &[u8] = b"\xff\xffbasalt:next-leaf";
/// A root's reserve: space a freeze frees for the fence it writes, so a full root can still
/// be frozen (the reserve is put into a root with its first write).
const RESERVE: &[u8] = b"\xff\xffbasalt:reserve";
/// Bytes of room the reserve (and an active leaf's padded fence) keeps for a frozen fence:
/// a split key of up to 1,024 bytes (S3's key limit) and the rest of the record.
const FENCE_ROOM: usize = 1200;
/// Leaf numbers sit above the shard and table bits of a table object's index.
const LEAF_SHIFT: u32 = 40;
/// Largest leaf number.
const MAX_LEAF: u32 = (1 << 23) - 1;
/// A table frozen this long is taken for the work of a dead gateway: its split is finished
/// by whoever finds it.
const TAKEOVER_AFTER_MS: i64 = 10_000;
/// Bound of one access's rounds of re-routing, waiting and splitting.
const MAX_ROUNDS: usize = 400;
/// Most splits one update may cause before it gives up (an entry too large for a table).
const MAX_SPLITS: usize = 4;
/// A table is split early once its body passes this share (percent) of the object size, so
/// updates, which rewrite the whole table, stay small.
const SPLIT_AT_PERCENT: u64 = 50;
/// A gateway looks at a table's size (one KV Stat) once per this many bytes of object size
/// in updates it makes to the table (every 8th update of a 128 KiB table, every update of a
/// table under 16 KiB): often enough to see it pass half full, rarely enough to cost little.
const CHECK_PER_BYTES: u64 = 16 << 10;
/// Entries read per page when copying a table.
const PAGE_ENTRIES: u32 = 1000;
/// Byte budget of one page.
const PAGE_BYTES: u32 = 1 << 20;

/// A split in progress: the key it splits at and the two new leaves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Split {
    pub at: String,
    pub left: u32,
    pub right: u32,
    pub since_ms: i64,
}

/// A leaf's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeafState {
    /// Copied, not yet named by the directory or not yet activated: read, not written.
    New,
    Active,
    /// Being split.
    Frozen(Split),
}

/// What an index table is (its fence record; absent: an unsplit root).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fence {
    /// An unsplit root being split.
    Frozen(Split),
    /// A split root: the leaves in key order (the first `lo` is "").
    Dir(Vec<DirEntry>),
    /// A leaf holding the keys in `[lo, hi)` (no `hi`: to the end).
    Leaf {
        lo: String,
        hi: Option<String>,
        state: LeafState,
        /// Room kept for the frozen fence that replaces an active one (see `FENCE_ROOM`).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pad: String,
    },
}

/// One leaf of a directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub lo: String,
    pub leaf: u32,
}

/// The table a key goes to: the root (leaf 0) or a leaf and its range.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Route {
    shard: u32,
    leaf: u32,
    lo: String,
    hi: Option<String>,
}

/// Cached directories: (bucket inode, shard) → the leaves (None: the root is unsplit).
type Dirs = HashMap<(InodeId, u32), Option<Arc<Vec<DirEntry>>>>;

fn dirs() -> &'static Mutex<Dirs> {
    static DIRS: OnceLock<Mutex<Dirs>> = OnceLock::new();
    DIRS.get_or_init(Default::default)
}

fn encode(fence: &Fence) -> Bytes {
    Bytes::from(serde_json::to_vec(fence).expect("fences serialise"))
}

fn decode(bytes: &Bytes) -> Result<Fence, IndexError> {
    serde_json::from_slice(bytes).map_err(|e| IndexError::Corrupt {
        key: "(index fence)".into(),
        reason: e.to_string(),
    })
}

fn corrupt(reason: impl Into<String>) -> IndexError {
    IndexError::Corrupt {
        key: "(index fence)".into(),
        reason: reason.into(),
    }
}

/// The cluster object of leaf `leaf` of shard `shard` (leaf 0: the root).
pub fn leaf_object(bucket: &BucketRecord, shard: u32, leaf: u32) -> ObjectId {
    let root = table_object(bucket, Table::Index, shard);
    ObjectId {
        inode: root.inode,
        index: root.index | (leaf as u64) << LEAF_SHIFT,
    }
}

/// The padded fence of an active (or new) leaf; its bytes are what writers expect.
fn leaf_fence(lo: &str, hi: &Option<String>, state: LeafState) -> Bytes {
    let pad = match state {
        LeafState::Frozen(_) => String::new(),
        _ => " ".repeat(FENCE_ROOM),
    };
    encode(&Fence::Leaf {
        lo: lo.into(),
        hi: hi.clone(),
        state,
        pad,
    })
}

impl Route {
    fn object(&self, bucket: &BucketRecord) -> ObjectId {
        leaf_object(bucket, self.shard, self.leaf)
    }

    fn holds(&self, key: &[u8]) -> bool {
        self.lo.as_bytes() <= key && self.hi.as_ref().is_none_or(|hi| key < hi.as_bytes())
    }

    /// The edits a write to this table starts with: they change nothing (but a root's
    /// reserve, put once) and hold only while the table is what this route expects.
    fn guard(&self) -> Vec<KvEdit> {
        if self.leaf == 0 {
            vec![
                KvEdit {
                    key: Bytes::from_static(FENCE),
                    value: None,
                    cond: KvCond::Absent,
                },
                KvEdit {
                    key: Bytes::from_static(RESERVE),
                    value: Some(Bytes::from(vec![b' '; FENCE_ROOM])),
                    cond: KvCond::Absent,
                },
            ]
        } else {
            let active = leaf_fence(&self.lo, &self.hi, LeafState::Active);
            vec![KvEdit {
                key: Bytes::from_static(FENCE),
                value: Some(active.clone()),
                cond: KvCond::Equals(active),
            }]
        }
    }
}

/// The route of `key` in shard `shard` by directory `dir`.
fn route_in(dir: &Option<Arc<Vec<DirEntry>>>, shard: u32, key: &[u8]) -> Route {
    let Some(leaves) = dir else {
        return Route {
            shard,
            leaf: 0,
            lo: String::new(),
            hi: None,
        };
    };
    let i = leaves
        .iter()
        .rposition(|e| e.lo.as_bytes() <= key)
        .unwrap_or(0);
    Route {
        shard,
        leaf: leaves[i].leaf,
        lo: leaves[i].lo.clone(),
        hi: leaves.get(i + 1).map(|e| e.lo.clone()),
    }
}

/// What a table's fence says to an access that routed there.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// The table is the one routed to: go on.
    Fine,
    /// The route is stale: read the directory again.
    Reroute,
    /// Being split: a writer waits (or finishes the split of a dead gateway).
    Frozen(Split),
    /// A new leaf the directory names: a writer activates it first.
    Activate,
}

/// Judge `fence` (the table's fence record) for an access routed by `route` to `key` (None:
/// a listing, any key of the range); `writing` accesses need an active table.
fn judge(
    route: &Route,
    fence: Option<&Bytes>,
    key: Option<&[u8]>,
    writing: bool,
) -> Result<Verdict, IndexError> {
    let fence = fence.map(decode).transpose()?;
    let frozen = |split: Split| {
        if writing {
            Verdict::Frozen(split)
        } else {
            Verdict::Fine
        }
    };
    if route.leaf == 0 {
        return Ok(match fence {
            None => Verdict::Fine,
            Some(Fence::Frozen(split)) => frozen(split),
            Some(Fence::Dir(_)) => Verdict::Reroute,
            Some(Fence::Leaf { .. }) => return Err(corrupt("a shard's root has a leaf's fence")),
        });
    }
    Ok(match fence {
        None | Some(Fence::Dir(_)) | Some(Fence::Frozen(_)) => Verdict::Reroute,
        Some(Fence::Leaf { lo, hi, state, .. }) => {
            if lo != route.lo || hi != route.hi || key.is_some_and(|k| !route.holds(k)) {
                Verdict::Reroute
            } else {
                match state {
                    LeafState::Active => Verdict::Fine,
                    LeafState::New if writing => Verdict::Activate,
                    LeafState::New => Verdict::Fine,
                    LeafState::Frozen(split) => frozen(split),
                }
            }
        }
    })
}

/// The shard's directory as cached, or read from its root.
async fn directory(
    cluster: &Cluster,
    bucket: &BucketRecord,
    shard: u32,
) -> Result<Option<Arc<Vec<DirEntry>>>, IndexError> {
    if let Some(d) = dirs()
        .lock()
        .expect("directory cache")
        .get(&(bucket.inode, shard))
    {
        return Ok(d.clone());
    }
    refresh(cluster, bucket, shard).await
}

/// Read the shard's directory from its root, and cache it.
async fn refresh(
    cluster: &Cluster,
    bucket: &BucketRecord,
    shard: u32,
) -> Result<Option<Arc<Vec<DirEntry>>>, IndexError> {
    let root = leaf_object(bucket, shard, 0);
    let fence = cluster
        .kv_get(root, vec![Bytes::from_static(FENCE)])
        .await?
        .into_iter()
        .next()
        .flatten();
    let dir = match fence.as_ref().map(decode).transpose()? {
        None | Some(Fence::Frozen(_)) => None,
        Some(Fence::Dir(leaves)) if !leaves.is_empty() => Some(Arc::new(leaves)),
        Some(_) => return Err(corrupt("a shard's root fence is not a directory")),
    };
    dirs()
        .lock()
        .expect("directory cache")
        .insert((bucket.inode, shard), dir.clone());
    Ok(dir)
}

/// The value of `key` in the index, from the table that holds it.
pub async fn get(
    cluster: &Cluster,
    bucket: &BucketRecord,
    key: &[u8],
) -> Result<Option<Bytes>, IndexError> {
    let shard = shard_of(bucket, key);
    for _ in 0..MAX_ROUNDS {
        let route = route_in(&directory(cluster, bucket, shard).await?, shard, key);
        let mut values = cluster
            .kv_get(
                route.object(bucket),
                vec![Bytes::copy_from_slice(key), Bytes::from_static(FENCE)],
            )
            .await?;
        let fence = values.pop().flatten();
        match judge(&route, fence.as_ref(), Some(key), false)? {
            Verdict::Reroute => {
                refresh(cluster, bucket, shard).await?;
            }
            _ => return Ok(values.pop().flatten()),
        }
    }
    Err(corrupt("the shard's directory never settled"))
}

/// Apply `edit` to the index table that holds its key, atomically with a check that the
/// table is still the one routed to; splits a full table and waits out (or finishes) a
/// split in progress. Returns the value the key held before; a failed condition of `edit`
/// is `ClientError::KvConflict { index: 0 }`, as for a lone edit.
pub async fn update(
    cluster: &Cluster,
    bucket: &BucketRecord,
    edit: KvEdit,
) -> Result<Option<Bytes>, IndexError> {
    let shard = shard_of(bucket, &edit.key);
    let mut splits = 0;
    for _ in 0..MAX_ROUNDS {
        let route = route_in(&directory(cluster, bucket, shard).await?, shard, &edit.key);
        let mut edits = route.guard();
        let guards = edits.len();
        edits.push(edit.clone());
        match cluster.kv_update(route.object(bucket), edits, true).await {
            Ok(mut previous) => {
                if due_for_size_check(cluster, bucket, &route) {
                    if let Err(e) = split_if_large(cluster, bucket, &route).await {
                        // The update is done; the table splits on NoSpace at the latest.
                        tracing::warn!(bucket = %bucket.name, shard, leaf = route.leaf, "early split: {e}");
                    }
                }
                return Ok(previous.pop().flatten());
            }
            Err(ClientError::KvConflict { index }) if index as usize >= guards => {
                return Err(ClientError::KvConflict { index: 0 }.into())
            }
            Err(ClientError::KvConflict { .. }) => {
                settle(cluster, bucket, &route, &edit.key).await?;
            }
            Err(ClientError::Status {
                status: Status::NoSpace,
            }) if splits < MAX_SPLITS => {
                splits += 1;
                tracing::debug!(bucket = %bucket.name, shard, leaf = route.leaf, "index table full");
                if let Err(e) = split(cluster, bucket, &route, "full").await {
                    tracing::warn!(bucket = %bucket.name, shard, leaf = route.leaf, "splitting an index table: {e}");
                    return Err(e);
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(corrupt("an index table stayed busy"))
}

/// Whether this update of a table is one whose size is looked at (see `CHECK_PER_BYTES`).
fn due_for_size_check(cluster: &Cluster, bucket: &BucketRecord, route: &Route) -> bool {
    let every = cluster
        .map()
        .pools
        .get(&bucket.pool)
        .map_or(1, |p| (p.object_size as u64 / CHECK_PER_BYTES).max(1));
    /// Updates made to each table: (bucket inode, shard, leaf) → count.
    type Counts = HashMap<(InodeId, u32, u32), u64>;
    static COUNTS: OnceLock<Mutex<Counts>> = OnceLock::new();
    let mut counts = COUNTS
        .get_or_init(Default::default)
        .lock()
        .expect("update counts");
    let n = counts
        .entry((bucket.inode, route.shard, route.leaf))
        .or_insert(0);
    *n += 1;
    (*n).is_multiple_of(every)
}

/// Split the table `route` leads to if its body passed `SPLIT_AT_PERCENT` of the index
/// pool's object size.
async fn split_if_large(
    cluster: &Cluster,
    bucket: &BucketRecord,
    route: &Route,
) -> Result<(), IndexError> {
    let Some(object_size) = cluster
        .map()
        .pools
        .get(&bucket.pool)
        .map(|p| p.object_size as u64)
    else {
        return Ok(());
    };
    let stat = cluster.kv_stat(route.object(bucket)).await?;
    if stat.body_bytes as u64 * 100 > object_size * SPLIT_AT_PERCENT && stat.entries >= 2 {
        split(cluster, bucket, route, "large").await?;
    }
    Ok(())
}

/// After a write's guard failed: find out why from the table's fence and make the next
/// round able to succeed (re-route, wait for or finish a split, activate a new leaf).
async fn settle(
    cluster: &Cluster,
    bucket: &BucketRecord,
    route: &Route,
    key: &[u8],
) -> Result<(), IndexError> {
    let fence = cluster
        .kv_get(route.object(bucket), vec![Bytes::from_static(FENCE)])
        .await?
        .into_iter()
        .next()
        .flatten();
    match judge(route, fence.as_ref(), Some(key), true)? {
        Verdict::Fine => {}
        Verdict::Reroute => {
            refresh(cluster, bucket, route.shard).await?;
        }
        Verdict::Activate => activate(cluster, bucket, route).await?,
        Verdict::Frozen(split) => {
            if crate::index::now_ms() - split.since_ms > TAKEOVER_AFTER_MS {
                tracing::warn!(
                    bucket = %bucket.name,
                    shard = route.shard,
                    leaf = route.leaf,
                    "finishing an index split a gateway left half done"
                );
                finish_split(cluster, bucket, route, &split).await?;
            } else {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
    }
    Ok(())
}

/// Make a new leaf active (it was copied and the directory names it).
async fn activate(
    cluster: &Cluster,
    bucket: &BucketRecord,
    route: &Route,
) -> Result<(), IndexError> {
    let new = leaf_fence(&route.lo, &route.hi, LeafState::New);
    let active = leaf_fence(&route.lo, &route.hi, LeafState::Active);
    match cluster
        .kv_update(
            route.object(bucket),
            vec![KvEdit {
                key: Bytes::from_static(FENCE),
                value: Some(active),
                cond: KvCond::Equals(new),
            }],
            true,
        )
        .await
    {
        Ok(_) | Err(ClientError::KvConflict { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Every entry of one table (object keys only), in key order.
async fn read_table(cluster: &Cluster, obj: ObjectId) -> Result<Vec<(Bytes, Bytes)>, IndexError> {
    let mut out = Vec::new();
    let mut after = Bytes::new();
    // Bound: each page moves past at least one entry of a finite table.
    loop {
        let page = cluster
            .kv_list(
                obj,
                KvList {
                    start_after: after.clone(),
                    prefix: Bytes::new(),
                    max_entries: PAGE_ENTRIES,
                    max_bytes: PAGE_BYTES,
                },
            )
            .await?;
        if let Some((k, _)) = page.entries.last() {
            after = k.clone();
        }
        out.extend(page.entries.into_iter().filter(|(k, _)| !is_meta(k)));
        if !page.truncated {
            return Ok(out);
        }
    }
}

/// A record of the index's own (fence, counter, reserve), not an object's entry.
pub fn is_meta(key: &[u8]) -> bool {
    key.first() == Some(&0xFF)
}

/// Where to split entries: the shortest prefix (at a character boundary) of the key at the
/// byte median that sorts after the key before it. None with fewer than two entries.
fn split_key(entries: &[(Bytes, Bytes)]) -> Option<String> {
    if entries.len() < 2 {
        return None;
    }
    let total: usize = entries.iter().map(|(k, v)| k.len() + v.len()).sum();
    let mut sum = 0;
    let mut median = entries.len() - 1;
    for (i, (k, v)) in entries.iter().enumerate() {
        sum += k.len() + v.len();
        if sum * 2 >= total {
            median = i.max(1);
            break;
        }
    }
    let key = String::from_utf8_lossy(&entries[median].0).into_owned();
    let before = &entries[median - 1].0;
    let shortest = key
        .char_indices()
        .map(|(i, c)| &key[..i + c.len_utf8()])
        .find(|p| p.as_bytes() > before.as_ref())
        .unwrap_or(&key);
    Some(shortest.to_string())
}

/// Two fresh leaf numbers of a split root's shard (its counter, with a KV condition).
async fn allocate_leaves(
    cluster: &Cluster,
    bucket: &BucketRecord,
    shard: u32,
) -> Result<(u32, u32), IndexError> {
    let root = leaf_object(bucket, shard, 0);
    for _ in 0..MAX_ROUNDS {
        let current = cluster
            .kv_get(root, vec![Bytes::from_static(NEXT_LEAF)])
            .await?
            .into_iter()
            .next()
            .flatten();
        let next: u32 = current
            .as_ref()
            .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
            .ok_or_else(|| corrupt("a split root without a leaf counter"))?;
        if next + 1 > MAX_LEAF {
            return Err(corrupt("the shard has no leaf numbers left"));
        }
        let edit = KvEdit {
            key: Bytes::from_static(NEXT_LEAF),
            value: Some(Bytes::from((next + 2).to_string())),
            cond: KvCond::Equals(current.expect("a counter")),
        };
        match cluster.kv_update(root, vec![edit], true).await {
            Ok(_) => return Ok((next, next + 1)),
            Err(ClientError::KvConflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(corrupt("the leaf counter stayed busy"))
}

/// Split the (full) table `route` leads to: freeze it, then [`finish_split`]. Returns
/// without doing anything when the table is not the active one the route expects (another
/// gateway got there first: the caller routes again).
async fn split(
    cluster: &Cluster,
    bucket: &BucketRecord,
    route: &Route,
    reason: &str,
) -> Result<(), IndexError> {
    let obj = route.object(bucket);
    let entries = read_table(cluster, obj).await?;
    let Some(at) = split_key(&entries) else {
        // One entry that fills a table: nothing to split.
        return Err(ClientError::Status {
            status: Status::NoSpace,
        }
        .into());
    };
    let (left, right) = if route.leaf == 0 {
        // The first split of a root: it is full, so no counter is written into it; the
        // numbers are fixed and the counter starts after them when it becomes a directory.
        (1, 2)
    } else {
        allocate_leaves(cluster, bucket, route.shard).await?
    };
    let split = Split {
        at,
        left,
        right,
        since_ms: crate::index::now_ms(),
    };
    let freeze = if route.leaf == 0 {
        vec![
            KvEdit {
                key: Bytes::from_static(RESERVE),
                value: None,
                cond: KvCond::Any,
            },
            KvEdit {
                key: Bytes::from_static(FENCE),
                value: Some(encode(&Fence::Frozen(split.clone()))),
                cond: KvCond::Absent,
            },
        ]
    } else {
        let active = leaf_fence(&route.lo, &route.hi, LeafState::Active);
        vec![KvEdit {
            key: Bytes::from_static(FENCE),
            value: Some(leaf_fence(
                &route.lo,
                &route.hi,
                LeafState::Frozen(split.clone()),
            )),
            cond: KvCond::Equals(active),
        }]
    };
    match cluster.kv_update(obj, freeze, true).await {
        Ok(_) => {}
        Err(ClientError::KvConflict { .. }) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    tracing::info!(
        bucket = %bucket.name,
        shard = route.shard,
        leaf = route.leaf,
        at = %split.at,
        reason,
        "splitting an index table"
    );
    finish_split(cluster, bucket, route, &split).await
}

/// A table's fence: its bytes and what they say.
async fn fence_of(
    cluster: &Cluster,
    obj: ObjectId,
) -> Result<(Option<Bytes>, Option<Fence>), IndexError> {
    let raw = cluster
        .kv_get(obj, vec![Bytes::from_static(FENCE)])
        .await?
        .into_iter()
        .next()
        .flatten();
    let fence = raw.as_ref().map(decode).transpose()?;
    Ok((raw, fence))
}

/// Finish the split of the frozen table `route` leads to: copy its entries into the two new
/// leaves (unless the directory already names them), switch the directory, activate the
/// leaves, drop the old table. Every step is conditional and may be redone.
async fn finish_split(
    cluster: &Cluster,
    bucket: &BucketRecord,
    route: &Route,
    split: &Split,
) -> Result<(), IndexError> {
    let root = leaf_object(bucket, route.shard, 0);
    let obj = route.object(bucket);
    let children = [
        Route {
            shard: route.shard,
            leaf: split.left,
            lo: route.lo.clone(),
            hi: Some(split.at.clone()),
        },
        Route {
            shard: route.shard,
            leaf: split.right,
            lo: split.at.clone(),
            hi: route.hi.clone(),
        },
    ];
    let named = |dir: &Option<Fence>| match dir {
        Some(Fence::Dir(leaves)) => leaves.iter().any(|e| e.leaf == split.left),
        _ => false,
    };
    let (mut raw, mut fence) = fence_of(cluster, root).await?;
    if !named(&fence) {
        let entries = read_table(cluster, obj).await?;
        for child in &children {
            let mut edits = vec![KvEdit {
                key: Bytes::from_static(FENCE),
                value: Some(leaf_fence(&child.lo, &child.hi, LeafState::New)),
                cond: KvCond::Absent,
            }];
            edits.extend(
                entries
                    .iter()
                    .filter(|(k, _)| child.holds(k))
                    .map(|(k, v)| KvEdit::put(k.clone(), v.clone())),
            );
            match cluster.kv_update(child.object(bucket), edits, true).await {
                // A conflict: the leaf was copied and activated already.
                Ok(_) | Err(ClientError::KvConflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Switch the directory (bounded: each round loses only to another split's switch).
        let mut switched = false;
        for _ in 0..MAX_ROUNDS {
            if named(&fence) {
                switched = true;
                break;
            }
            let mut edits = Vec::new();
            let new_dir = if route.leaf == 0 {
                if fence != Some(Fence::Frozen(split.clone())) {
                    return Err(corrupt("a split root is neither frozen nor a directory"));
                }
                // The root's entries go in the same atomic update that makes it a directory.
                edits.extend(entries.iter().map(|(k, _)| KvEdit::delete(k.clone())));
                edits.push(KvEdit::put(
                    Bytes::from_static(NEXT_LEAF),
                    Bytes::from((split.right + 1).to_string()),
                ));
                vec![
                    DirEntry {
                        lo: String::new(),
                        leaf: split.left,
                    },
                    DirEntry {
                        lo: split.at.clone(),
                        leaf: split.right,
                    },
                ]
            } else {
                let Some(Fence::Dir(leaves)) = &fence else {
                    return Err(corrupt("a split leaf's root is not a directory"));
                };
                let mut leaves = leaves.clone();
                let Some(i) = leaves.iter().position(|e| e.leaf == route.leaf) else {
                    // Not named and not the table split: nothing this split can do.
                    return Ok(());
                };
                leaves.splice(
                    i..=i,
                    [
                        DirEntry {
                            lo: route.lo.clone(),
                            leaf: split.left,
                        },
                        DirEntry {
                            lo: split.at.clone(),
                            leaf: split.right,
                        },
                    ],
                );
                leaves
            };
            edits.insert(
                0,
                KvEdit {
                    key: Bytes::from_static(FENCE),
                    value: Some(encode(&Fence::Dir(new_dir))),
                    cond: KvCond::Equals(raw.clone().unwrap_or_default()),
                },
            );
            match cluster.kv_update(root, edits, true).await {
                Ok(_) => {
                    switched = true;
                    break;
                }
                Err(ClientError::KvConflict { .. }) => {
                    (raw, fence) = fence_of(cluster, root).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if !switched {
            return Err(corrupt("the shard's directory stayed busy"));
        }
    }
    for child in &children {
        activate(cluster, bucket, child).await?;
    }
    if route.leaf != 0 {
        cluster.delete_object(obj).await?;
    }
    refresh(cluster, bucket, route.shard).await?;
    Ok(())
}

/// A walk over one shard's entries under a prefix, in key order across its tables, a page
/// per round trip (plus a fence check). Every listing of the index goes through it.
pub struct ShardScan {
    bucket: BucketRecord,
    shard: u32,
    prefix: Bytes,
    /// The next page starts after this key.
    after: Bytes,
    /// The next page is routed by this bound (the next table's low key), not by `after`.
    from: Option<String>,
    done: bool,
}

impl ShardScan {
    pub fn new(bucket: &BucketRecord, shard: u32, prefix: Bytes) -> Self {
        Self {
            bucket: bucket.clone(),
            shard,
            prefix,
            after: Bytes::new(),
            from: None,
            done: false,
        }
    }

    /// Skip ahead: the next page starts after `key`, unless the walk is already past it.
    pub fn skip_past(&mut self, key: &[u8]) {
        if key > self.after.as_ref() {
            self.after = Bytes::copy_from_slice(key);
            if self.from.as_ref().is_some_and(|f| f.as_bytes() <= key) {
                self.from = None;
            }
        }
    }

    /// The next entries, or None once the walk is done; never an empty page before the end.
    pub async fn next_page(
        &mut self,
        cluster: &Cluster,
    ) -> Result<Option<Vec<(Bytes, Bytes)>>, IndexError> {
        let mut rounds = 0usize;
        while !self.done {
            rounds += 1;
            let dir = directory(cluster, &self.bucket, self.shard).await?;
            if rounds > MAX_ROUNDS + dir.as_ref().map_or(0, |d| d.len()) {
                return Err(corrupt("a listing of the index never settled"));
            }
            let at: &[u8] = match &self.from {
                Some(f) if f.as_bytes() > self.after.as_ref() => f.as_bytes(),
                _ => &self.after,
            };
            let route = route_in(&dir, self.shard, at);
            let obj = route.object(&self.bucket);
            let page = cluster
                .kv_list(
                    obj,
                    KvList {
                        start_after: self.after.clone(),
                        prefix: self.prefix.clone(),
                        max_entries: PAGE_ENTRIES,
                        max_bytes: PAGE_BYTES,
                    },
                )
                .await?;
            let fence = cluster
                .kv_get(obj, vec![Bytes::from_static(FENCE)])
                .await?
                .into_iter()
                .next()
                .flatten();
            if judge(&route, fence.as_ref(), None, false)? == Verdict::Reroute {
                refresh(cluster, &self.bucket, self.shard).await?;
                continue;
            }
            let entries: Vec<(Bytes, Bytes)> = page
                .entries
                .iter()
                .filter(|(k, _)| !is_meta(k) && route.holds(k))
                .cloned()
                .collect();
            if page.truncated {
                if let Some((k, _)) = page.entries.last() {
                    self.skip_past(k);
                }
            } else {
                // This table is done: on to the next one, if it can hold the prefix.
                match &route.hi {
                    None => self.done = true,
                    Some(hi) => {
                        let prefix = &self.prefix[..];
                        if hi.as_bytes() > prefix && !hi.as_bytes().starts_with(prefix) {
                            self.done = true;
                        } else {
                            self.from = Some(hi.clone());
                        }
                    }
                }
                if let Some((k, _)) = entries.last() {
                    self.skip_past(k);
                }
            }
            if !entries.is_empty() {
                return Ok(Some(entries));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(keys: &[&str]) -> Vec<(Bytes, Bytes)> {
        keys.iter()
            .map(|k| (Bytes::from(k.to_string()), Bytes::from_static(b"value")))
            .collect()
    }

    /// Goal: a split key divides the entries near their byte median, is the shortest
    /// prefix that still sorts after the key before it, and needs two entries.
    #[test]
    fn split_keys() {
        assert_eq!(split_key(&entries(&["a"])), None);
        assert_eq!(
            split_key(&entries(&["apple", "banana", "cherry", "date"])).as_deref(),
            Some("b")
        );
        assert_eq!(
            split_key(&entries(&["dir/a1", "dir/a2", "dir/b1", "dir/b2"])).as_deref(),
            Some("dir/a2")
        );
        let at = split_key(&entries(&["k/é1", "k/é2"])).unwrap();
        assert!(at.as_bytes() > "k/é1".as_bytes() && at.as_bytes() <= "k/é2".as_bytes());
    }

    /// Goal: keys route to the leaf whose range holds them; without a directory, to the
    /// root.
    #[test]
    fn routes() {
        assert_eq!(route_in(&None, 3, b"x").leaf, 0);
        let dir = Some(Arc::new(vec![
            DirEntry {
                lo: String::new(),
                leaf: 1,
            },
            DirEntry {
                lo: "m".into(),
                leaf: 2,
            },
        ]));
        let r = route_in(&dir, 3, b"a");
        assert_eq!((r.leaf, r.hi.as_deref()), (1, Some("m")));
        let r = route_in(&dir, 3, b"m");
        assert_eq!((r.leaf, r.lo.as_str(), r.hi.clone()), (2, "m", None));
        assert!(r.holds(b"zz") && !r.holds(b"l"));
    }

    /// Goal: a fence is judged by what the access needs: readers go on through frozen and
    /// new tables, writers wait or activate; a mismatched range or a directory re-routes.
    #[test]
    fn verdicts() {
        let root = Route {
            shard: 0,
            leaf: 0,
            lo: String::new(),
            hi: None,
        };
        let split = Split {
            at: "m".into(),
            left: 1,
            right: 2,
            since_ms: 0,
        };
        let frozen = encode(&Fence::Frozen(split.clone()));
        assert_eq!(judge(&root, None, Some(b"a"), true).unwrap(), Verdict::Fine);
        assert_eq!(
            judge(&root, Some(&frozen), None, false).unwrap(),
            Verdict::Fine
        );
        assert_eq!(
            judge(&root, Some(&frozen), Some(b"a"), true).unwrap(),
            Verdict::Frozen(split)
        );
        let dir = encode(&Fence::Dir(vec![]));
        assert_eq!(
            judge(&root, Some(&dir), None, false).unwrap(),
            Verdict::Reroute
        );
        let leaf = Route {
            shard: 0,
            leaf: 2,
            lo: "m".into(),
            hi: None,
        };
        let new = leaf_fence("m", &None, LeafState::New);
        assert_eq!(
            judge(&leaf, Some(&new), Some(b"n"), true).unwrap(),
            Verdict::Activate
        );
        assert_eq!(
            judge(&leaf, Some(&new), Some(b"n"), false).unwrap(),
            Verdict::Fine
        );
        assert_eq!(
            judge(&leaf, None, Some(b"n"), false).unwrap(),
            Verdict::Reroute
        );
        let other = leaf_fence("p", &None, LeafState::Active);
        assert_eq!(
            judge(&leaf, Some(&other), Some(b"n"), false).unwrap(),
            Verdict::Reroute
        );
        // The padded active fence leaves room for the frozen one that replaces it.
        let long_at = Split {
            at: "k".repeat(1024),
            left: MAX_LEAF,
            right: MAX_LEAF,
            since_ms: i64::MAX,
        };
        let frozen_leaf = leaf_fence("m", &None, LeafState::Frozen(long_at.clone()));
        assert!(frozen_leaf.len() <= leaf_fence("m", &None, LeafState::Active).len());
        let frozen_root = encode(&Fence::Frozen(long_at));
        assert!(FENCE.len() + frozen_root.len() <= RESERVE.len() + FENCE_ROOM);
    }
}
