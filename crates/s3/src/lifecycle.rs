//! Lifecycle rules of a bucket, as stored in its record, and what they decide for one
//! version or upload at one moment. The gateway's lifecycle worker applies the decisions
//! (`gateway::lifecycle`); see docs/design.md, "Lifecycle".

use crate::index::ObjectEntry;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most rules of one bucket (S3's limit).
pub const MAX_RULES: usize = 1000;

/// One lifecycle rule: which objects (prefix, tags, sizes) and what happens to them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    pub id: String,
    pub enabled: bool,
    #[serde(default)]
    pub prefix: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_greater_than: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_less_than: Option<u64>,
    /// Expire current versions this many days after they were written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_days: Option<u32>,
    /// Expire current versions from this moment (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_date_ms: Option<i64>,
    /// Remove a delete marker that is a key's only version.
    #[serde(default)]
    pub expired_object_delete_marker: bool,
    /// Remove noncurrent versions this many days after they became noncurrent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noncurrent_days: Option<u32>,
    /// ... but keep this many of the newest noncurrent versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newer_noncurrent_versions: Option<u32>,
    /// Abort multipart uploads this many days after they were started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_multipart_days: Option<u32>,
}

/// What the rules decide for one key's versions (newest first, the current one at 0).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The current version expires (a delete marker for a versioned bucket, else removal).
    pub expire_current: bool,
    /// The current delete marker is the key's only version and goes.
    pub remove_lone_marker: bool,
    /// Noncurrent versions to remove, by index into the versions.
    pub remove_noncurrent: Vec<usize>,
}

impl Rule {
    /// Whether this rule applies to a version of `key` of this size with these tags.
    fn covers(&self, key: &str, size: u64, tags: &BTreeMap<String, String>) -> bool {
        self.enabled
            && key.starts_with(&self.prefix)
            && self.tags.iter().all(|(k, v)| tags.get(k) == Some(v))
            && self.size_greater_than.is_none_or(|g| size > g)
            && self.size_less_than.is_none_or(|l| size < l)
    }

    /// Whether it aborts an upload of `key` started at `initiated_ms` (`day_ms`: a day).
    pub fn aborts(&self, key: &str, initiated_ms: i64, now_ms: i64, day_ms: i64) -> bool {
        self.enabled
            && key.starts_with(&self.prefix)
            && self
                .abort_multipart_days
                .is_some_and(|d| now_ms >= initiated_ms + d as i64 * day_ms)
    }
}

/// What `rules` decide, at `now_ms` with days of `day_ms`, for `versions` of `key` (newest
/// first, as `versions::all` gives them).
pub fn judge(
    rules: &[Rule],
    key: &str,
    versions: &[ObjectEntry],
    now_ms: i64,
    day_ms: i64,
) -> Verdict {
    let mut verdict = Verdict::default();
    let Some(current) = versions.first() else {
        return verdict;
    };
    for rule in rules {
        if !current.delete_marker && rule.covers(key, current.size, &current.tags) {
            let by_days = rule
                .expiration_days
                .is_some_and(|d| now_ms >= current.modified_ms + d as i64 * day_ms);
            let by_date = rule.expiration_date_ms.is_some_and(|t| now_ms >= t);
            verdict.expire_current |= by_days || by_date;
        }
        if current.delete_marker
            && versions.len() == 1
            && rule.expired_object_delete_marker
            && rule.enabled
            && key.starts_with(&rule.prefix)
        {
            verdict.remove_lone_marker = true;
        }
        if let Some(days) = rule.noncurrent_days {
            let keep = rule.newer_noncurrent_versions.unwrap_or(0) as usize;
            for i in 1..versions.len() {
                let v = &versions[i];
                // A version became noncurrent when the next newer one was written.
                let since = versions[i - 1].modified_ms;
                let old_enough = now_ms >= since + days as i64 * day_ms;
                let beyond_kept = i > keep;
                let covered = v.delete_marker && rule.enabled && key.starts_with(&rule.prefix)
                    || rule.covers(key, v.size, &v.tags);
                if old_enough && beyond_kept && covered && !verdict.remove_noncurrent.contains(&i) {
                    verdict.remove_noncurrent.push(i);
                }
            }
        }
    }
    verdict.remove_noncurrent.sort_unstable();
    verdict
}

/// Of the versions judged removable earlier (`judged`: their ids — noncurrent versions, a
/// lone delete marker), those `rules` still remove now that the key's versions are
/// `versions` (newest first), by index. A removal takes effect on the record as it is then,
/// so it must still be called for: a version a racing DELETE of the newer ones made current
/// again, or made one of the newest noncurrent versions a rule keeps, or a delete marker a
/// racing PUT put a version over, stays; nothing that was not judged goes.
pub fn still_removed(
    rules: &[Rule],
    key: &str,
    versions: &[ObjectEntry],
    judged: &[Option<String>],
    now_ms: i64,
    day_ms: i64,
) -> Vec<usize> {
    let verdict = judge(rules, key, versions, now_ms, day_ms);
    let mut out = verdict.remove_noncurrent;
    if verdict.remove_lone_marker {
        out.insert(0, 0);
    }
    out.retain(|&i| judged.contains(&versions[i].version_id));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 1000;

    fn v(modified_ms: i64, marker: bool) -> ObjectEntry {
        ObjectEntry {
            size: 10,
            modified_ms,
            delete_marker: marker,
            ..Default::default()
        }
    }

    /// A version with an id (its write time).
    fn named(modified_ms: i64, marker: bool) -> ObjectEntry {
        ObjectEntry {
            version_id: Some(format!("v{modified_ms}")),
            ..v(modified_ms, marker)
        }
    }

    fn ids(vs: &[ObjectEntry], at: &[usize]) -> Vec<Option<String>> {
        at.iter().map(|&i| vs[i].version_id.clone()).collect()
    }

    fn rule() -> Rule {
        Rule {
            id: "r".into(),
            enabled: true,
            prefix: "tmp/".into(),
            ..Default::default()
        }
    }

    /// Goal: current versions expire by age or date, only under the rule's prefix, tags and
    /// sizes, and not while the rule is disabled.
    #[test]
    fn expiration_of_current_versions() {
        let r = Rule {
            expiration_days: Some(2),
            ..rule()
        };
        let vs = [v(0, false)];
        assert!(!judge(std::slice::from_ref(&r), "tmp/a", &vs, 1999, DAY).expire_current);
        assert!(judge(std::slice::from_ref(&r), "tmp/a", &vs, 2000, DAY).expire_current);
        assert!(!judge(std::slice::from_ref(&r), "keep/a", &vs, 5000, DAY).expire_current);
        let disabled = Rule {
            enabled: false,
            ..r.clone()
        };
        assert!(!judge(&[disabled], "tmp/a", &vs, 5000, DAY).expire_current);
        let tagged = Rule {
            tags: [("k".to_string(), "v".to_string())].into(),
            ..r.clone()
        };
        assert!(!judge(&[tagged], "tmp/a", &vs, 5000, DAY).expire_current);
        let small = Rule {
            size_less_than: Some(5),
            ..r
        };
        assert!(!judge(&[small], "tmp/a", &vs, 5000, DAY).expire_current);
        let dated = Rule {
            expiration_date_ms: Some(100),
            ..rule()
        };
        assert!(judge(&[dated], "tmp/a", &vs, 100, DAY).expire_current);
    }

    /// Goal: noncurrent versions go a number of days after the next version replaced them,
    /// keeping the newest N; a lone delete marker goes when asked.
    #[test]
    fn noncurrent_versions_and_markers() {
        let r = Rule {
            noncurrent_days: Some(1),
            newer_noncurrent_versions: Some(1),
            expired_object_delete_marker: true,
            ..rule()
        };
        // Written at 0, 500, 3000, 3100: the one of 500 became noncurrent at 3000.
        let vs = [v(3100, false), v(3000, false), v(500, false), v(0, false)];
        let verdict = judge(std::slice::from_ref(&r), "tmp/a", &vs, 3600, DAY);
        assert_eq!(
            verdict.remove_noncurrent,
            vec![3],
            "only 0's was replaced a day ago"
        );
        assert!(!verdict.expire_current);
        let verdict = judge(std::slice::from_ref(&r), "tmp/a", &vs, 4200, DAY);
        assert_eq!(
            verdict.remove_noncurrent,
            vec![2, 3],
            "the newest noncurrent one stays"
        );
        assert!(judge(std::slice::from_ref(&r), "tmp/a", &[v(0, true)], 1, DAY).remove_lone_marker);
        assert!(!judge(&[r], "tmp/a", &[v(9, true), v(0, false)], 1, DAY).remove_lone_marker);
    }

    /// Goal: a removal judged on one record applies to the record as it is when the index
    /// takes it only where the rules still call for it — the regression: a pass judged a
    /// noncurrent version, a DELETE of the newer version made it current again, and the
    /// pass removed the key's current version.
    #[test]
    fn judged_removals_hold_only_while_the_rules_still_call_for_them() {
        let r = Rule {
            noncurrent_days: Some(1),
            expired_object_delete_marker: true,
            ..rule()
        };
        let rules = std::slice::from_ref(&r);
        // Written at 0, replaced at 500: due at 1500.
        let judged_on = [named(500, false), named(0, false)];
        let judged = ids(
            &judged_on,
            &judge(rules, "tmp/a", &judged_on, 1600, DAY).remove_noncurrent,
        );
        assert_eq!(judged, vec![Some("v0".to_string())]);
        assert_eq!(
            still_removed(rules, "tmp/a", &judged_on, &judged, 1600, DAY),
            vec![1]
        );
        // The newer version was removed by id meanwhile: the judged one is current.
        let undone = [named(0, false)];
        assert!(still_removed(rules, "tmp/a", &undone, &judged, 1600, DAY).is_empty());
        // Nothing that was not judged goes, though the rules would remove it now.
        let newer = [named(3000, false), named(2000, false), named(0, false)];
        assert_eq!(
            still_removed(rules, "tmp/a", &newer, &judged, 9000, DAY),
            vec![2]
        );

        // Keeping the newest noncurrent version: a DELETE of the newest noncurrent one makes
        // a judged one the newest again.
        let keep = Rule {
            newer_noncurrent_versions: Some(1),
            ..r.clone()
        };
        let keep = std::slice::from_ref(&keep);
        let vs = [
            named(3000, false),
            named(2000, false),
            named(1000, false),
            named(0, false),
        ];
        let judged = ids(&vs, &judge(keep, "tmp/a", &vs, 9000, DAY).remove_noncurrent);
        assert_eq!(judged, ids(&vs, &[2, 3]));
        let fewer = [named(3000, false), named(1000, false), named(0, false)];
        assert_eq!(
            still_removed(keep, "tmp/a", &fewer, &judged, 9000, DAY),
            vec![2]
        );

        // A lone delete marker judged, then a PUT over it: the marker stays.
        let lone = [named(100, true)];
        let judged = ids(&lone, &[0]);
        assert!(judge(rules, "tmp/a", &lone, 200, DAY).remove_lone_marker);
        assert_eq!(
            still_removed(rules, "tmp/a", &lone, &judged, 200, DAY),
            vec![0]
        );
        let put_over = [named(150, false), named(100, true)];
        assert!(still_removed(rules, "tmp/a", &put_over, &judged, 200, DAY).is_empty());
    }

    /// Goal: uploads are aborted a number of days after they started, under the prefix.
    #[test]
    fn aborted_uploads() {
        let r = Rule {
            abort_multipart_days: Some(3),
            ..rule()
        };
        assert!(!r.aborts("tmp/u", 0, 2999, DAY));
        assert!(r.aborts("tmp/u", 0, 3000, DAY));
        assert!(!r.aborts("other/u", 0, 9000, DAY));
    }
}
