//! Object versions: how a change of a key edits its index record, which holds every version
//! of the key (the current one at the top, the noncurrent ones in `older`, newest first).
//! Pure functions of records, so the rules are tested without a cluster; the gateway applies
//! them in one atomic read–modify–write of the record (see docs/design.md, "Versioning").

use crate::buckets::Versioning;
use crate::index::{ObjectEntry, Segment};

/// Largest encoded record the gateway writes: the KV value limit (1 MiB) with room to spare,
/// and at most half an index table's object (see [`max_record_bytes`]).
pub const MAX_RECORD_BYTES: usize = (1 << 20) - 4096;

/// The largest record a bucket whose index tables are `object_size` bytes can take: a table
/// past half its object splits, so a record of up to half fits in a table of its own.
pub fn max_record_bytes(object_size: u32) -> usize {
    MAX_RECORD_BYTES.min(object_size as usize / 2)
}

/// A fresh version id: the time in milliseconds (12 hex digits), then 64 random bits.
pub fn new_version_id() -> String {
    let ms = crate::index::now_ms().max(0) as u64;
    let random = crate::keys::random_bytes::<8>().unwrap_or_else(|_| {
        // The clock and a process-wide counter still keep ids apart.
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        (NEXT.fetch_add(1, Ordering::Relaxed) ^ std::process::id() as u64).to_be_bytes()
    });
    format!("{:012x}{}", ms & 0xffff_ffff_ffff, hex::encode(random))
}

/// A version id as S3 shows it (`null` for None).
pub fn shown(id: &Option<String>) -> String {
    id.clone().unwrap_or_else(|| "null".into())
}

/// A version id as S3 names it in a request, as stored (`null` is None).
pub fn named(id: &str) -> Option<String> {
    (id != "null").then(|| id.to_string())
}

/// Every version of a record, newest first (each without `older`).
pub fn all(record: ObjectEntry) -> Vec<ObjectEntry> {
    let mut current = record;
    let mut out = Vec::with_capacity(1 + current.older.len());
    let older = std::mem::take(&mut current.older);
    out.push(current);
    out.extend(older);
    out
}

/// A record from versions, newest first; None when there are none.
fn from_versions(mut versions: Vec<ObjectEntry>) -> Option<ObjectEntry> {
    if versions.is_empty() {
        return None;
    }
    let rest = versions.split_off(1);
    let mut top = versions.pop().expect("one version");
    top.older = rest;
    Some(top)
}

/// The version `id` of a record (None: `null`), if it has it.
pub fn find<'a>(record: &'a ObjectEntry, id: &Option<String>) -> Option<&'a ObjectEntry> {
    std::iter::once(record)
        .chain(record.older.iter())
        .find(|v| &v.version_id == id)
}

/// The outcome of a change: the new record (None: the key goes) and the data no version
/// references any more.
#[derive(Debug, PartialEq, Eq)]
pub struct Changed {
    pub record: Option<ObjectEntry>,
    pub unreferenced: Vec<Segment>,
}

/// The data of `dropped` that `kept` does not use (a copy onto itself shares segments).
fn unreferenced(dropped: &[ObjectEntry], kept: &Option<ObjectEntry>) -> Vec<Segment> {
    let in_use: Vec<&Segment> = kept
        .iter()
        .flat_map(|r| std::iter::once(r).chain(r.older.iter()))
        .flat_map(|v| v.segments.iter())
        .collect();
    dropped
        .iter()
        .flat_map(|v| v.segments.iter())
        .filter(|s| !in_use.contains(s))
        .cloned()
        .collect()
}

/// Make `new` (a version or a delete marker, without `older`) the current version of the
/// key whose record is `record`, as `versioning` says: never enabled — it replaces the
/// record; Enabled — the previous versions stay, noncurrent; Suspended — `new` is the
/// `null` version and replaces any `null` version.
pub fn put(
    record: Option<ObjectEntry>,
    new: ObjectEntry,
    versioning: Option<Versioning>,
) -> Changed {
    let previous = record.map(all).unwrap_or_default();
    let (kept, dropped): (Vec<ObjectEntry>, Vec<ObjectEntry>) = match versioning {
        None => (Vec::new(), previous),
        Some(Versioning::Enabled) => (previous, Vec::new()),
        Some(Versioning::Suspended) => previous.into_iter().partition(|v| v.version_id.is_some()),
    };
    let mut versions = Vec::with_capacity(1 + kept.len());
    versions.push(new);
    versions.extend(kept);
    let record = from_versions(versions);
    Changed {
        unreferenced: unreferenced(&dropped, &record),
        record,
    }
}

/// Remove version `id` (None: `null`) of a record: the next newest becomes current when it
/// was; the record goes with its last version. Also returns the removed version (None when
/// the record had no such version, and then nothing changes).
pub fn remove(record: ObjectEntry, id: &Option<String>) -> (Changed, Option<ObjectEntry>) {
    let (removed, kept): (Vec<ObjectEntry>, Vec<ObjectEntry>) =
        all(record).into_iter().partition(|v| &v.version_id == id);
    let record = from_versions(kept);
    let changed = Changed {
        unreferenced: unreferenced(&removed, &record),
        record,
    };
    (changed, removed.into_iter().next())
}

/// A delete marker made now, with a fresh id when versioning is enabled (`null` when it is
/// suspended).
pub fn delete_marker(versioning: Versioning) -> ObjectEntry {
    ObjectEntry {
        modified_ms: crate::index::now_ms(),
        delete_marker: true,
        version_id: (versioning == Versioning::Enabled).then(new_version_id),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(id: Option<&str>, data: u64) -> ObjectEntry {
        ObjectEntry {
            size: 1,
            etag: format!("e{data}"),
            modified_ms: data as i64,
            segments: vec![Segment { data, size: 1 }],
            version_id: id.map(String::from),
            ..Default::default()
        }
    }

    fn ids(r: &Option<ObjectEntry>) -> Vec<String> {
        r.clone()
            .map(all)
            .unwrap_or_default()
            .iter()
            .map(|v| shown(&v.version_id))
            .collect()
    }

    /// Goal: a bucket never versioned keeps one version per key and frees the one replaced;
    /// an enabled one keeps every version, newest first, freeing nothing.
    #[test]
    fn put_unversioned_and_enabled() {
        let c = put(Some(v(None, 1)), v(None, 2), None);
        assert_eq!(ids(&c.record), ["null"]);
        assert_eq!(c.unreferenced, vec![Segment { data: 1, size: 1 }]);
        let c = put(c.record, v(Some("a"), 3), Some(Versioning::Enabled));
        let c = put(c.record, v(Some("b"), 4), Some(Versioning::Enabled));
        assert_eq!(ids(&c.record), ["b", "a", "null"]);
        assert!(c.unreferenced.is_empty());
        assert!(c
            .record
            .as_ref()
            .unwrap()
            .older
            .iter()
            .all(|o| o.older.is_empty()));
    }

    /// Goal: while suspended, a PUT makes the `null` version, replacing (and freeing) the
    /// previous `null` version wherever it was, and keeping the others.
    #[test]
    fn put_suspended_replaces_the_null_version() {
        let r = put(Some(v(None, 1)), v(Some("a"), 2), Some(Versioning::Enabled)).record;
        let c = put(r, v(None, 3), Some(Versioning::Suspended));
        assert_eq!(ids(&c.record), ["null", "a"]);
        assert_eq!(c.unreferenced, vec![Segment { data: 1, size: 1 }]);
        assert_eq!(c.record.as_ref().unwrap().segments[0].data, 3);
    }

    /// Goal: removing a version frees its data; removing the current one makes the next
    /// newest current; removing the last removes the record; an unknown id changes nothing.
    #[test]
    fn remove_versions() {
        let r = put(
            Some(v(Some("a"), 1)),
            v(Some("b"), 2),
            Some(Versioning::Enabled),
        )
        .record;
        let r = put(r, v(Some("c"), 3), Some(Versioning::Enabled))
            .record
            .unwrap();
        let (c, gone) = remove(r.clone(), &Some("zzz".into()));
        assert!(gone.is_none());
        assert_eq!(c.record, Some(r.clone()));
        assert!(c.unreferenced.is_empty());
        let (c, gone) = remove(r, &Some("c".into()));
        assert_eq!(gone.unwrap().segments[0].data, 3);
        assert_eq!(ids(&c.record), ["b", "a"]);
        assert_eq!(c.unreferenced, vec![Segment { data: 3, size: 1 }]);
        let (c, _) = remove(c.record.unwrap(), &Some("a".into()));
        let (c, _) = remove(c.record.unwrap(), &Some("b".into()));
        assert_eq!(c.record, None);
    }

    /// Goal: a copy of a version onto the same key shares its data: dropping the older
    /// version then frees nothing the new one reads.
    #[test]
    fn shared_data_is_not_freed() {
        let c = put(Some(v(None, 1)), v(None, 1), None);
        assert!(c.unreferenced.is_empty());
    }

    /// Goal: version ids are unique, ordered by time and 28 hex digits.
    #[test]
    fn version_ids() {
        let a = new_version_id();
        let b = new_version_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 28);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(named("null"), None);
        assert_eq!(shown(&named("x")), "x");
    }
}
