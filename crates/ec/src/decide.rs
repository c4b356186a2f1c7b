//! What peering (and recovery, and scrub) does with one stripe (docs/design.md,
//! "Erasure-coded pools"): which version every position ends at, and how it gets there.
//!
//! Every write of a stripe writes all its chunks at one version V (a partial write reads the
//! rest of the stripe first), in two phases: a durable *stash* of each chunk on every live
//! position, then a *promote* of each stash to the committed chunk. So k chunks decode
//! consistently iff they carry the same version, and the state of a stripe after any crash
//! is, per live position, a committed chunk (or none) and possibly a stash. Pure, so it is
//! table-tested and model-tested against the protocol with a crash at every step.

/// A write's version as the PG assigned it (`(interval, counter)` packed so it orders).
pub type StripeVersion = u64;

/// What one live position holds of a stripe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PositionState {
    /// Version of the committed chunk (None: no committed chunk).
    pub committed: Option<StripeVersion>,
    /// Version of a stashed chunk awaiting its promote (None: no stash).
    pub stash: Option<StripeVersion>,
}

/// What to do with a stripe: every live position ends with its committed chunk at
/// `target` (or with none, when `target` is None) and no stash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The version the stripe ends at: the newest one at least k positions hold (committed
    /// or stashed). None: the stripe ends absent (no chunk was ever committed, and the
    /// stashes of a write that reached fewer than k positions are dropped).
    pub target: Option<StripeVersion>,
    /// Positions whose stash is at `target`: promote it (it becomes the committed chunk).
    pub promote: Vec<usize>,
    /// Positions whose committed chunk is missing or older: rebuild it at `target` from k
    /// positions that hold it (after the promotes).
    pub rebuild: Vec<usize>,
    /// Positions holding a stash of another version: drop it.
    pub drop_stash: Vec<usize>,
    /// Positions whose committed chunk must go (the stripe ends absent).
    pub delete: Vec<usize>,
    /// Some position committed a version newer than `target` (or the stripe has committed
    /// chunks but no version with k of them): more chunks were lost than the code
    /// tolerates. Nothing may be changed and reads fail (EIO): serving the older state would
    /// silently undo an acknowledged write.
    pub unfound: Option<StripeVersion>,
}

impl Plan {
    /// Nothing to do: every live position already holds the target, committed, no stash.
    pub fn is_clean(&self) -> bool {
        self.unfound.is_none()
            && self.promote.is_empty()
            && self.rebuild.is_empty()
            && self.drop_stash.is_empty()
            && self.delete.is_empty()
    }
}

/// Decide for one stripe of a k-of-`positions.len()` code from the live positions' states
/// (`None`: the position is a hole — its OSD is down, or there is none).
pub fn decide(k: usize, positions: &[Option<PositionState>]) -> Plan {
    let live = || {
        positions
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.map(|p| (i, p)))
    };
    let holds = |p: &PositionState, v: StripeVersion| p.committed == Some(v) || p.stash == Some(v);
    let mut versions: Vec<StripeVersion> = live()
        .flat_map(|(_, p)| [p.committed, p.stash])
        .flatten()
        .collect();
    versions.sort_unstable();
    versions.dedup();
    let target = versions
        .iter()
        .rev()
        .copied()
        .find(|&v| live().filter(|(_, p)| holds(p, v)).count() >= k);
    let newest_committed = live().filter_map(|(_, p)| p.committed).max();
    if let Some(c) = newest_committed {
        if target.is_none_or(|t| c > t) {
            return Plan {
                target,
                unfound: Some(c),
                ..Plan::default()
            };
        }
    }
    let mut plan = Plan {
        target,
        ..Plan::default()
    };
    for (i, p) in live() {
        match target {
            Some(t) => {
                if p.committed != Some(t) {
                    if p.stash == Some(t) {
                        plan.promote.push(i);
                        continue;
                    }
                    plan.rebuild.push(i);
                }
                if p.stash.is_some_and(|s| s != t) {
                    plan.drop_stash.push(i);
                }
            }
            None => {
                // No committed chunk anywhere (else unfound above): drop every stash.
                if p.stash.is_some() {
                    plan.drop_stash.push(i);
                }
                if p.committed.is_some() {
                    plan.delete.push(i);
                }
            }
        }
    }
    assert_consistent(k, positions, &plan);
    plan
}

/// The plan's promises checked against its input (a few comparisons per position). A
/// violation would make peering change chunks wrongly, so it stops the process: the stripe
/// never settles below a committed (hence acknowledged) version, its target is held by k
/// positions, and every action names a live position in the state it acts on.
fn assert_consistent(k: usize, positions: &[Option<PositionState>], plan: &Plan) {
    let at = |i: usize| positions.get(i).copied().flatten();
    let newest_committed = positions.iter().flatten().filter_map(|p| p.committed).max();
    if plan.unfound.is_some() {
        assert!(
            plan.promote.is_empty()
                && plan.rebuild.is_empty()
                && plan.drop_stash.is_empty()
                && plan.delete.is_empty(),
            "an unfound stripe must be left as it is: {plan:?}"
        );
        return;
    }
    assert!(
        newest_committed <= plan.target,
        "the stripe settles at {:?}, below the committed {newest_committed:?}",
        plan.target
    );
    if let Some(t) = plan.target {
        let holding = positions
            .iter()
            .flatten()
            .filter(|p| p.committed == Some(t) || p.stash == Some(t))
            .count();
        assert!(
            holding >= k,
            "target {t} held by {holding} < k = {k} positions"
        );
        assert!(
            plan.delete.is_empty(),
            "chunks deleted from a stripe that stays: {plan:?}"
        );
    }
    for &i in &plan.promote {
        assert!(
            plan.target.is_some() && at(i).is_some_and(|p| p.stash == plan.target),
            "position {i} promoted without a stash of the target: {plan:?} from {positions:?}"
        );
    }
    for &i in &plan.rebuild {
        assert!(
            at(i).is_some_and(|p| p.committed != plan.target && p.stash != plan.target)
                && !plan.promote.contains(&i),
            "position {i} rebuilt though it holds the target: {plan:?} from {positions:?}"
        );
    }
    for &i in &plan.drop_stash {
        assert!(
            at(i).is_some_and(|p| p.stash.is_some() && p.stash != plan.target),
            "position {i}'s stash dropped though it is the target or absent: {plan:?}"
        );
    }
    for &i in &plan.delete {
        assert!(
            at(i).is_some_and(|p| p.committed.is_some()),
            "position {i} deleted without a committed chunk: {plan:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(committed: Option<u64>, stash: Option<u64>) -> Option<PositionState> {
        Some(PositionState { committed, stash })
    }

    /// Goal: for a 2+1 stripe at v1 and a write v2 crashed at each step, peering picks one
    /// outcome and never mixes versions: forward with k holders of v2, back when fewer and
    /// nobody committed it, unfound when a commit of v2 happened but too few chunks survive.
    #[test]
    fn each_crash_point_of_a_write_ends_in_one_state() {
        // (what, positions, expected target, expected unfound)
        type Case = (
            &'static str,
            Vec<Option<PositionState>>,
            Option<u64>,
            Option<u64>,
        );
        let table: Vec<Case> = vec![
            (
                "no write",
                vec![at(Some(1), None), at(Some(1), None), at(Some(1), None)],
                Some(1),
                None,
            ),
            (
                "stash on one position only",
                vec![at(Some(1), Some(2)), at(Some(1), None), at(Some(1), None)],
                Some(1),
                None,
            ),
            (
                "stash on two positions: forward",
                vec![
                    at(Some(1), Some(2)),
                    at(Some(1), None),
                    at(Some(1), Some(2)),
                ],
                Some(2),
                None,
            ),
            (
                "one promote done, one stash, one position down",
                vec![at(Some(2), None), None, at(Some(1), Some(2))],
                Some(2),
                None,
            ),
            (
                "v2 committed on one, the two others down",
                vec![None, None, at(Some(2), None)],
                None,
                Some(2),
            ),
            (
                "v2 committed on one, a v1 chunk and a hole",
                vec![at(Some(1), None), None, at(Some(2), None)],
                None,
                Some(2),
            ),
            (
                "a new stripe whose first write reached one position",
                vec![at(None, Some(5)), at(None, None), at(None, None)],
                None,
                None,
            ),
            (
                "a replaced position holds nothing yet",
                vec![at(Some(3), None), at(None, None), at(Some(3), None)],
                Some(3),
                None,
            ),
        ];
        for (what, positions, target, unfound) in table {
            let plan = decide(2, &positions);
            assert_eq!(
                (plan.target, plan.unfound),
                (target, unfound),
                "{what}: {plan:?}"
            );
        }
        let plan = decide(2, &[at(Some(2), None), None, at(Some(1), Some(2))]);
        assert_eq!((plan.promote, plan.rebuild), (vec![2], vec![]));
        let plan = decide(
            2,
            &[at(Some(3), None), at(None, Some(1)), at(Some(3), None)],
        );
        assert_eq!((plan.rebuild, plan.drop_stash), (vec![1], vec![1]));
    }

    /// One position of the model: durable and volatile (lost on a crash) state.
    #[derive(Clone, Copy, Debug, Default)]
    struct Pos {
        durable: PositionState,
        current: PositionState,
    }

    /// Tiny deterministic generator (no dependency for a test).
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Goal: the write protocol (stash durably on every live position, acknowledge, promote
    /// each position without a flush) against peering's plan, with a crash injected after
    /// every step and up to m positions lost: afterwards every live position holds the same
    /// committed version (never a mix), and that version is the last acknowledged write or
    /// a later one that was not acknowledged. Checked for 2+1, 4+2 and 3+1 over many seeds.
    #[test]
    fn protocol_with_crashes_at_every_step_never_mixes_versions() {
        for (k, m) in [(2usize, 1usize), (4, 2), (3, 1), (8, 3)] {
            let n = k + m;
            for seed in 1..400u64 {
                let mut rng = Rng(seed * 0x9e37_79b9 + k as u64);
                let mut pos = vec![Pos::default(); n];
                let mut down = vec![false; n];
                let mut acked: Option<u64> = None;
                let mut version = 0u64;
                // A few writes, each cut by a crash at a random step (or not at all).
                for _ in 0..6 {
                    version += 1;
                    let live: Vec<usize> = (0..n).filter(|&i| !down[i]).collect();
                    if live.len() < k + 1 {
                        break; // min_size k+1: the PG takes no writes
                    }
                    let steps = 2 * live.len() + 1;
                    let crash_at = rng.below(steps as u64 + 3) as usize;
                    let mut step = 0;
                    let mut crashed = false;
                    for &i in &live {
                        if step == crash_at {
                            crashed = true;
                            break;
                        }
                        // A stash is durable when the position answers: its flush makes
                        // everything before it durable too (the store's log is a prefix).
                        pos[i].current.stash = Some(version);
                        pos[i].durable = pos[i].current;
                        step += 1;
                    }
                    if !crashed {
                        acked = Some(version);
                        for &i in &live {
                            if step == crash_at {
                                crashed = true;
                                break;
                            }
                            // Promote, volatile until some later flush.
                            pos[i].current = PositionState {
                                committed: Some(version),
                                stash: None,
                            };
                            if rng.below(2) == 0 {
                                pos[i].durable = pos[i].current;
                            }
                            step += 1;
                        }
                    }
                    if crashed || rng.below(3) == 0 {
                        // Power cut: every position keeps only what is durable; then peering
                        // over the live positions, with up to m of them lost for good.
                        for p in pos.iter_mut() {
                            p.current = p.durable;
                        }
                        let lost = rng.below(m as u64 + 1) as usize;
                        for _ in 0..lost {
                            let i = rng.below(n as u64) as usize;
                            if down.iter().filter(|d| **d).count() < m {
                                down[i] = true;
                            }
                        }
                        let view: Vec<Option<PositionState>> = (0..n)
                            .map(|i| (!down[i]).then_some(pos[i].current))
                            .collect();
                        let plan = decide(k, &view);
                        assert_eq!(
                            plan.unfound, None,
                            "{k}+{m} seed {seed}: {plan:?} {view:?} {down:?}"
                        );
                        if let (Some(a), t) = (acked, plan.target) {
                            assert!(
                                t >= Some(a),
                                "{k}+{m} seed {seed}: acked v{a} lost: {plan:?}"
                            );
                        }
                        // Apply the plan; everything is flushed at the end of peering.
                        for i in 0..n {
                            if down[i] {
                                continue;
                            }
                            pos[i].current = PositionState {
                                committed: plan.target,
                                stash: None,
                            };
                            pos[i].durable = pos[i].current;
                        }
                        let after: Vec<Option<PositionState>> = (0..n)
                            .map(|i| (!down[i]).then_some(pos[i].current))
                            .collect();
                        assert!(decide(k, &after).is_clean(), "{k}+{m} seed {seed}");
                        // What peering kept is now the stripe's state, acknowledged or not.
                        if plan.target.is_some() {
                            acked = plan.target;
                        }
                        // Replaced positions come back empty and are rebuilt.
                        for i in 0..n {
                            if down[i] && rng.below(2) == 0 {
                                down[i] = false;
                                let t = plan.target;
                                pos[i] = Pos {
                                    durable: PositionState {
                                        committed: t,
                                        stash: None,
                                    },
                                    current: PositionState {
                                        committed: t,
                                        stash: None,
                                    },
                                };
                            }
                        }
                    }
                }
            }
        }
    }
}
