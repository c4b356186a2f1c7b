//! Unfound stripes (docs/design.md, "Erasure-coded pools", "Unfound stripes"): a stripe
//! whose newest committed version is held by fewer than k live positions. Its other chunks
//! are on positions that are down (or on earlier holders that are), so I/O to it waits for
//! them rather than fail or serve older data; an operator who knows they will not return
//! gives it up. Pure: which positions it waits for, and what giving it up keeps.

use crate::decide::{decide, PositionState, StripeVersion};

/// Positions that do not hold `version` (holes included): the ones whose return, with the
/// chunk, can make an unfound stripe decodable again.
pub fn missing(positions: &[Option<PositionState>], version: StripeVersion) -> Vec<usize> {
    positions
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.is_some_and(|p| p.holds(version)))
        .map(|(i, _)| i)
        .collect()
}

/// What giving up an unfound stripe does: `lost` (and every version above `keep`) is
/// abandoned; the stripe is rewritten, at a version newer than any, with the contents of
/// `keep` — the newest version k positions still hold — or, when no version has k
/// positions, with what the stripe reads without any chunk of its own (its parent's data
/// on a clone, else zeros).
///
/// A rewrite rather than a rollback in place or a delete: the lost version's chunks may
/// still sit on an OSD that returns later, and only a newer version held by k positions
/// makes peering drop them instead of finding the stripe unfound again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GiveUp {
    /// The newest committed version, held by fewer than k positions.
    pub lost: StripeVersion,
    /// The version whose contents the stripe keeps (None: none decodes).
    pub keep: Option<StripeVersion>,
}

/// What giving up the stripe in `positions` (each live position's state, None for a hole)
/// keeps and loses; None when the stripe is not unfound (nothing to give up).
pub fn give_up(k: usize, positions: &[Option<PositionState>]) -> Option<GiveUp> {
    let plan = decide(k, positions);
    let lost = plan.unfound?;
    // decide never settles below a committed version; the kept one is older by definition.
    assert!(
        plan.target.is_none_or(|t| t < lost),
        "giving up {lost} would keep the newer {:?}",
        plan.target
    );
    Some(GiveUp {
        lost,
        keep: plan.target,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn at(committed: Option<u64>) -> Option<PositionState> {
        Some(PositionState {
            committed,
            stash: None,
            partial: None,
        })
    }

    /// Goal: the positions an unfound stripe waits for, and what a give-up keeps, on the
    /// cases of issue 30 (2+1, min_size 2, one position down and another behind).
    #[test]
    fn give_up_keeps_the_newest_decodable_version() {
        // v2 written on {1, 2} while 0 was down; 0 back (v1, behind), then 1 down.
        let view = [at(Some(1)), None, at(Some(2))];
        assert_eq!(missing(&view, 2), vec![0, 1]);
        assert_eq!(
            give_up(2, &view),
            Some(GiveUp {
                lost: 2,
                keep: None
            })
        );
        // 3+1: v1 still on three positions, v2 committed on one only: v1 is kept.
        let view = [at(Some(1)), at(Some(1)), at(Some(2)), at(Some(1))];
        assert_eq!(
            give_up(3, &view),
            Some(GiveUp {
                lost: 2,
                keep: Some(1)
            })
        );
        // A stripe that decodes is not unfound: nothing to give up.
        assert_eq!(give_up(2, &[at(Some(2)), None, at(Some(2))]), None);
        assert_eq!(give_up(2, &[at(None), at(None), at(None)]), None);
        // A cut write (stashes only) is rolled back by peering, never "given up".
        let stash = Some(PositionState {
            committed: Some(1),
            stash: Some(2),
            partial: None,
        });
        assert_eq!(give_up(2, &[stash, at(Some(1)), None]), None);
    }

    /// Goal: with min_size = k (issue 30's 2+1, min_size 2), positions going down and coming
    /// back with what they held, and rebuilds lagging behind: (1) a stripe peering does not
    /// find unfound settles at or above the acknowledged write; (2) an unfound stripe's lost
    /// version is the acknowledged write, enough of the positions it waits for hold it, and
    /// with every position back it is found at that version — unavailable, never lost;
    /// (3) after a give-up (the kept contents rewritten at a new version on the live
    /// positions) the lost chunks returning never bring it back nor make it unfound again.
    #[test]
    fn unfound_stripes_are_found_when_positions_return_and_a_give_up_stays() {
        for (k, m) in [(2usize, 1usize), (3, 1), (4, 2)] {
            let n = k + m;
            let (mut unfound_seen, mut given_up) = (0u64, 0u64);
            for seed in 1..400u64 {
                let mut rng = crate::TestRng(seed * 0x9e37_79b9 + k as u64);
                // Committed version per position (writes complete: the model is about
                // positions coming and going, crashes are decide's own model test).
                let mut held: Vec<Option<u64>> = vec![Some(1); n];
                let mut down = vec![false; n];
                // What each version reads as (a give-up rewrites older contents).
                let mut contents: BTreeMap<u64, u64> = BTreeMap::from([(1, 1)]);
                let (mut acked, mut next) = (1u64, 2u64);
                for _ in 0..60 {
                    let view: Vec<Option<PositionState>> = (0..n)
                        .map(|i| (!down[i]).then(|| at(held[i])).flatten())
                        .collect();
                    let live = down.iter().filter(|d| !**d).count();
                    let plan = decide(k, &view);
                    let active = live >= k;
                    let what = format!("{k}+{m} seed {seed}: {held:?} down {down:?} {plan:?}");
                    if active {
                        match plan.unfound {
                            None => {
                                assert!(
                                    plan.target >= Some(acked),
                                    "acked v{acked} undone: {what}"
                                );
                                assert_eq!(contents[&plan.target.expect("t")], contents[&acked]);
                            }
                            Some(lost) => {
                                unfound_seen += 1;
                                assert_eq!(lost, acked, "{what}");
                                // Live holders plus the missing positions that hold it: k.
                                let live_holding = (0..n)
                                    .filter(|&i| !down[i] && held[i] == Some(lost))
                                    .count();
                                let waited = missing(&view, lost)
                                    .into_iter()
                                    .filter(|&i| held[i] == Some(lost))
                                    .count();
                                assert!(live_holding < k && live_holding + waited >= k, "{what}");
                                let all: Vec<_> = held.iter().map(|&h| at(h)).collect();
                                let back = decide(k, &all);
                                assert_eq!(
                                    (back.unfound, back.target),
                                    (None, Some(acked)),
                                    "{what}"
                                );
                            }
                        }
                    }
                    match rng.below(6) {
                        // A client write: only to a found stripe of an active PG, on
                        // every live position.
                        0 | 1 if active && plan.unfound.is_none() => {
                            for i in (0..n).filter(|&i| !down[i]) {
                                held[i] = Some(next);
                            }
                            contents.insert(next, next);
                            acked = next;
                            next += 1;
                        }
                        // Recovery rebuilds one lagging live position.
                        2 if active && plan.unfound.is_none() => {
                            if let Some(i) = (0..n).find(|&i| !down[i] && held[i] != plan.target) {
                                held[i] = plan.target;
                            }
                        }
                        // The operator gives the stripe up.
                        3 if active && plan.unfound.is_some() && rng.below(3) == 0 => {
                            let gu = give_up(k, &view).expect("unfound");
                            let kept = gu.keep.map_or(0, |v| contents[&v]);
                            for i in (0..n).filter(|&i| !down[i]) {
                                held[i] = Some(next);
                            }
                            contents.insert(next, kept);
                            acked = next;
                            next += 1;
                            given_up += 1;
                            let all: Vec<_> = held.iter().map(|&h| at(h)).collect();
                            let back = decide(k, &all);
                            assert_eq!((back.unfound, back.target), (None, Some(acked)), "{what}");
                        }
                        // A position goes down (it keeps its chunks) or comes back.
                        _ => {
                            let i = rng.below(n as u64) as usize;
                            if down[i] || live > 1 {
                                down[i] = !down[i];
                            }
                        }
                    }
                }
            }
            // The run reached what it is about.
            assert!(unfound_seen > 50, "{k}+{m}: {unfound_seen} unfound views");
            assert!(given_up > 10, "{k}+{m}: {given_up} give-ups");
        }
    }
}
