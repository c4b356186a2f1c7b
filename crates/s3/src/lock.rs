//! Object lock (WORM): a version's retention (GOVERNANCE or COMPLIANCE, until a date) and
//! legal hold, a bucket's default retention, and what they forbid. See docs/design.md,
//! "Object lock".

use serde::{Deserialize, Serialize};

/// A retention mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// Removable early by the bucket owner with `x-amz-bypass-governance-retention`.
    Governance,
    /// Removable by no one until it ends; it can only be extended.
    Compliance,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "GOVERNANCE" => Some(Mode::Governance),
            "COMPLIANCE" => Some(Mode::Compliance),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Governance => "GOVERNANCE",
            Mode::Compliance => "COMPLIANCE",
        }
    }
}

/// A version's retention: protected until `until_ms` (ms since the Unix epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    pub mode: Mode,
    pub until_ms: i64,
}

/// A bucket's object lock: enabled, with a default retention for new versions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketLock {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<Mode>,
    /// Default retention in days (years are kept as 365 days each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_days: Option<u32>,
}

impl BucketLock {
    /// The retention a new version gets when its request names none.
    pub fn default_retention(&self, now_ms: i64) -> Option<Retention> {
        Some(Retention {
            mode: self.default_mode?,
            until_ms: now_ms + self.default_days? as i64 * 86_400_000,
        })
    }
}

/// Why a change of a locked version is refused.
pub const PROTECTED: &str = "Access Denied because object protected by object lock";

/// Whether a version with this retention and legal hold may be removed (or its data
/// overwritten) now; `bypass`: the owner's `x-amz-bypass-governance-retention`.
pub fn removable(
    retention: Option<Retention>,
    legal_hold: bool,
    now_ms: i64,
    bypass: bool,
) -> bool {
    if legal_hold {
        return false;
    }
    match retention {
        Some(r) if r.until_ms > now_ms => r.mode == Mode::Governance && bypass,
        _ => true,
    }
}

/// Whether a version's retention may change from `old` to `new` now: extending is always
/// allowed; shortening, removing or changing the mode only of GOVERNANCE with `bypass`
/// (COMPLIANCE never, until it ends).
pub fn may_change(
    old: Option<Retention>,
    new: Option<Retention>,
    now_ms: i64,
    bypass: bool,
) -> bool {
    let Some(old) = old.filter(|o| o.until_ms > now_ms) else {
        return true;
    };
    match new {
        Some(n) if n.mode == old.mode && n.until_ms >= old.until_ms => true,
        _ => old.mode == Mode::Governance && bypass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Mode = Mode::Governance;
    const C: Mode = Mode::Compliance;

    fn r(mode: Mode, until_ms: i64) -> Option<Retention> {
        Some(Retention { mode, until_ms })
    }

    /// Goal: a version under retention or legal hold is not removable; GOVERNANCE yields to
    /// a bypass, COMPLIANCE to nothing until it ends.
    #[test]
    fn removal() {
        assert!(removable(None, false, 10, false));
        assert!(!removable(None, true, 10, true));
        assert!(!removable(r(G, 20), false, 10, false));
        assert!(removable(r(G, 20), false, 10, true));
        assert!(!removable(r(C, 20), false, 10, true));
        assert!(removable(r(C, 20), false, 20, false), "it ended");
    }

    /// Goal: retention only grows, except GOVERNANCE with a bypass.
    #[test]
    fn changes() {
        assert!(may_change(r(C, 20), r(C, 30), 10, false));
        assert!(!may_change(r(C, 20), r(C, 15), 10, true));
        assert!(!may_change(r(C, 20), r(G, 30), 10, true));
        assert!(!may_change(r(C, 20), None, 10, true));
        assert!(!may_change(r(G, 20), None, 10, false));
        assert!(may_change(r(G, 20), None, 10, true));
        assert!(may_change(r(G, 20), r(C, 30), 10, true));
        assert!(may_change(r(C, 20), None, 25, false), "it ended");
        let lock = BucketLock {
            default_mode: Some(G),
            default_days: Some(1),
        };
        assert_eq!(lock.default_retention(0), r(G, 86_400_000));
        assert_eq!(BucketLock::default().default_retention(0), None);
    }
}
