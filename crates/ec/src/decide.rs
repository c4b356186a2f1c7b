//! What peering (and recovery, and scrub) does with one stripe (docs/design.md,
//! "Erasure-coded pools"): which version every position ends at, and how it gets there.
//!
//! Every write of a stripe ends with all its chunks at one version V, in two phases: a
//! durable *stash* on every live position, then a *promote* of each stash into the committed
//! chunk. A whole-stripe write stashes whole chunks; a partial write stashes, per position,
//! only the blocks that change over the chunk at its *base* version (none at all: a *bump*),
//! and such a partial stash yields chunk V only merged into the chunk at its base. So k
//! chunks decode consistently iff they carry the same version, and the state of a stripe
//! after any crash is, per live position, a committed chunk (or none) and possibly a whole
//! and a partial stash. Pure, so it is table-tested and model-tested against the protocol
//! with real bytes and a crash at every step.

/// A write's version as the PG assigned it (`(interval, counter)` packed so it orders).
pub type StripeVersion = u64;

/// What one live position holds of a stripe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PositionState {
    /// Version of the committed chunk (None: no committed chunk).
    pub committed: Option<StripeVersion>,
    /// Version of a stashed chunk awaiting its promote (None: no stash).
    pub stash: Option<StripeVersion>,
    /// A partial stash awaiting its merge (None: none).
    pub partial: Option<PartialStash>,
}

/// A partial stash: the blocks of version `version` that differ from the chunk at `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialStash {
    /// The write's version.
    pub version: StripeVersion,
    /// The committed version it applies to.
    pub base: StripeVersion,
}

impl PositionState {
    /// Does this position hold `v` — committed, stashed whole, or stashed partially over
    /// the committed chunk it applies to?
    pub fn holds(&self, v: StripeVersion) -> bool {
        self.committed == Some(v) || self.stash == Some(v) || self.partial_holds(v)
    }

    /// Is there a partial stash of `v` over its base?
    fn partial_holds(&self, v: StripeVersion) -> bool {
        self.partial
            .is_some_and(|p| p.version == v && self.committed == Some(p.base))
    }
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
    /// Positions whose partial stash is at `target` over their committed chunk at its
    /// base (and no whole stash is): merge it into the committed chunk.
    pub merge: Vec<usize>,
    /// Positions whose committed chunk is missing or older: rebuild it at `target` from k
    /// positions that hold it (after the promotes).
    pub rebuild: Vec<usize>,
    /// Positions holding a stash of another version: drop it.
    pub drop_stash: Vec<usize>,
    /// Positions holding a partial stash that is not merged: drop it.
    pub drop_partial: Vec<usize>,
    /// Positions whose committed chunk must go (the stripe ends absent).
    pub delete: Vec<usize>,
    /// Some position committed a version newer than `target` (or the stripe has committed
    /// chunks but no version with k of them): fewer than k live positions hold it. Nothing
    /// may be changed and I/O to the stripe waits (serving the older state would silently
    /// undo an acknowledged write) until positions holding it return or an operator gives
    /// it up ([`crate::unfound`]).
    pub unfound: Option<StripeVersion>,
}

impl Plan {
    /// Nothing to do: every live position already holds the target, committed, no stash.
    pub fn is_clean(&self) -> bool {
        self.unfound.is_none()
            && self.promote.is_empty()
            && self.merge.is_empty()
            && self.rebuild.is_empty()
            && self.drop_stash.is_empty()
            && self.drop_partial.is_empty()
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
    let mut versions: Vec<StripeVersion> = live()
        .flat_map(|(_, p)| [p.committed, p.stash, p.partial.map(|s| s.version)])
        .flatten()
        .collect();
    versions.sort_unstable();
    versions.dedup();
    let target = versions
        .iter()
        .rev()
        .copied()
        .find(|&v| live().filter(|(_, p)| p.holds(v)).count() >= k);
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
                let mut merged = false;
                if p.committed != Some(t) {
                    if p.stash == Some(t) {
                        plan.promote.push(i);
                        if p.partial.is_some() {
                            plan.drop_partial.push(i);
                        }
                        continue;
                    }
                    if p.partial_holds(t) {
                        plan.merge.push(i);
                        merged = true;
                    } else {
                        plan.rebuild.push(i);
                    }
                }
                if p.stash.is_some_and(|s| s != t) {
                    plan.drop_stash.push(i);
                }
                if p.partial.is_some() && !merged {
                    plan.drop_partial.push(i);
                }
            }
            None => {
                // No committed chunk anywhere (else unfound above): drop every stash.
                if p.stash.is_some() {
                    plan.drop_stash.push(i);
                }
                if p.partial.is_some() {
                    plan.drop_partial.push(i);
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
                && plan.merge.is_empty()
                && plan.rebuild.is_empty()
                && plan.drop_stash.is_empty()
                && plan.drop_partial.is_empty()
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
        let holding = positions.iter().flatten().filter(|p| p.holds(t)).count();
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
    for &i in &plan.merge {
        assert!(
            plan.target
                .is_some_and(|t| at(i).is_some_and(|p| p.partial_holds(t)))
                && !plan.promote.contains(&i),
            "position {i} merged without a partial stash of the target over its base: \
             {plan:?} from {positions:?}"
        );
    }
    for &i in &plan.drop_partial {
        assert!(
            at(i).is_some_and(|p| p.partial.is_some()) && !plan.merge.contains(&i),
            "position {i}'s partial stash dropped though absent or merged: {plan:?}"
        );
    }
    for &i in &plan.rebuild {
        assert!(
            at(i).is_some_and(|p| plan.target.is_none_or(|t| !p.holds(t)))
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
        Some(PositionState {
            committed,
            stash,
            partial: None,
        })
    }

    fn partial(committed: Option<u64>, version: u64, base: u64) -> Option<PositionState> {
        Some(PositionState {
            committed,
            stash: None,
            partial: Some(PartialStash { version, base }),
        })
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
                let mut rng = crate::TestRng(seed * 0x9e37_79b9 + k as u64);
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
                                partial: None,
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
                                partial: None,
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
                                        partial: None,
                                    },
                                    current: PositionState {
                                        committed: t,
                                        stash: None,
                                        partial: None,
                                    },
                                };
                            }
                        }
                    }
                }
            }
        }
    }

    /// Goal: a partial stash holds its version only over its base: merged there, dropped
    /// (and the position rebuilt) over any other chunk; a bump counts like data.
    #[test]
    fn a_partial_stash_counts_only_over_its_base() {
        // Write v2 over v1: position 0 touched, 1 bumped, 2 parity; crash before promotes.
        let plan = decide(2, &[partial(Some(1), 2, 1), partial(Some(1), 2, 1), None]);
        assert_eq!((plan.target, plan.merge.clone()), (Some(2), vec![0, 1]));
        // One merge done, one stash left over its base, the third position down.
        let plan = decide(2, &[at(Some(2), None), partial(Some(1), 2, 1), None]);
        assert_eq!((plan.target, plan.merge), (Some(2), vec![1]));
        // A partial stash over a chunk that is not its base does not count.
        let plan = decide(
            2,
            &[
                partial(Some(1), 2, 1),
                partial(Some(0), 2, 1),
                at(Some(1), None),
            ],
        );
        assert_eq!(plan.target, Some(1));
        assert_eq!(plan.drop_partial, vec![0, 1]);
        assert_eq!(plan.rebuild, vec![1], "position 1 lacks v1 as well");
        let plan = decide(
            2,
            &[
                partial(Some(2), 3, 2),
                partial(Some(1), 3, 2),
                at(Some(2), None),
            ],
        );
        assert_eq!(
            (plan.target, plan.merge.clone(), plan.rebuild.clone()),
            (Some(2), vec![], vec![1])
        );
        assert_eq!(plan.drop_partial, vec![0, 1]);
        // Committed v2 on one position only, the partial of v2 elsewhere over a wrong base:
        // unfound rather than settled below an acknowledged write.
        let plan = decide(
            2,
            &[at(Some(2), None), partial(None, 2, 1), at(Some(1), None)],
        );
        assert_eq!(plan.unfound, Some(2));
    }

    /// What one position holds in the byte-level model: the committed chunk, a whole stash
    /// and a partial stash (first chunk-local block and the blocks; empty: a bump).
    #[derive(Clone, Debug, Default)]
    struct Held {
        committed: Option<(u64, Vec<u8>)>,
        stash: Option<(u64, Vec<u8>)>,
        partial: Option<(PartialStash, usize, Vec<u8>)>,
    }

    impl Held {
        fn state(&self) -> PositionState {
            PositionState {
                committed: self.committed.as_ref().map(|c| c.0),
                stash: self.stash.as_ref().map(|s| s.0),
                partial: self.partial.as_ref().map(|p| p.0),
            }
        }

        /// A member's merge: refuses (panics, in the model) over anything but the base.
        fn merge(&mut self) {
            let (p, first, blocks) = self.partial.take().expect("a partial stash");
            let (v, chunk) = self.committed.as_mut().expect("a committed chunk");
            assert_eq!(*v, p.base, "merged over a chunk that is not its base");
            chunk[first * BLOCK..first * BLOCK + blocks.len()].copy_from_slice(&blocks);
            *v = p.version;
        }
    }

    const BLOCK: usize = 4096;
    /// Blocks per chunk in the byte-level model.
    const CHUNK_BLOCKS: usize = 4;

    /// Bytes for a write (deterministic in the seed).
    fn bytes(len: usize, rng: &mut crate::TestRng) -> Vec<u8> {
        let seed = rng.below(u64::MAX);
        (0..len as u64)
            .map(|i| (seed.wrapping_mul(i | 1) >> 24) as u8)
            .collect()
    }

    /// The stashes of a partial write of stripe blocks `first..end` (new bytes `data`) over
    /// the chunks `old` at version `base`, as the primary computes them: touched data chunks
    /// their new blocks, parity old ⊕ the parity delta over the range every touched chunk's
    /// blocks fit in, untouched data chunks a bump.
    fn partial_stashes(
        scheme: &crate::Scheme,
        old: &[Vec<u8>],
        (first, end): (usize, usize),
        data: &[u8],
        version: u64,
        base: u64,
    ) -> Vec<(PartialStash, usize, Vec<u8>)> {
        let k = scheme.k();
        let touched = |i: usize| (first..end).filter(move |b| b / CHUNK_BLOCKS == i);
        let (lo, hi) = (first..end)
            .map(|b| b % CHUNK_BLOCKS)
            .fold((CHUNK_BLOCKS, 0), |(lo, hi), x| (lo.min(x), hi.max(x + 1)));
        let range = lo * BLOCK..hi * BLOCK;
        let mut new_data: Vec<Vec<u8>> = old[..k].to_vec();
        for b in first..end {
            let (i, at) = (b / CHUNK_BLOCKS, (b % CHUNK_BLOCKS) * BLOCK);
            let from = (b - first) * BLOCK;
            new_data[i][at..at + BLOCK].copy_from_slice(&data[from..from + BLOCK]);
        }
        let deltas: Vec<Option<Vec<u8>>> = (0..k)
            .map(|i| {
                touched(i).next().map(|_| {
                    let mut d = new_data[i][range.clone()].to_vec();
                    crate::xor_into(&mut d, &old[i][range.clone()]);
                    d
                })
            })
            .collect();
        let refs: Vec<Option<&[u8]>> = deltas.iter().map(|d| d.as_deref()).collect();
        let parity = scheme.parity_delta(&refs).expect("parity delta");
        let stash = PartialStash { version, base };
        (0..scheme.width())
            .map(|i| {
                if i >= k {
                    let mut p = old[i][range.clone()].to_vec();
                    crate::xor_into(&mut p, &parity[i - k]);
                    return (stash, lo, p);
                }
                match touched(i).next() {
                    Some(b0) => {
                        let n = touched(i).count();
                        let at = (b0 % CHUNK_BLOCKS) * BLOCK;
                        (
                            stash,
                            b0 % CHUNK_BLOCKS,
                            new_data[i][at..at + n * BLOCK].to_vec(),
                        )
                    }
                    None => (stash, 0, Vec::new()),
                }
            })
            .collect()
    }

    /// Goal: the write protocol with partial writes — stashes of only the changed blocks,
    /// parity by delta and bumps, merged by the promotes — against peering's plan, with real
    /// bytes through the codec, a crash after every step and up to m positions lost: after
    /// each peering every live position holds, byte for byte, its chunk of the stripe the
    /// decided version wrote (so every k of them decode to it, never to a mix), and that
    /// version is the last acknowledged write or a later one. 2+1, 3+1, 4+2 and 8+3.
    #[test]
    fn partial_writes_with_crashes_at_every_step_never_decode_a_mix() {
        for (k, m) in [(2usize, 1usize), (3, 1), (4, 2), (8, 3)] {
            let scheme = crate::Scheme::new(k as u32, m as u32).expect("scheme");
            let n = k + m;
            let stripe_bytes = k * CHUNK_BLOCKS * BLOCK;
            let seeds = if k == 8 { 100 } else { 150 };
            let (mut partial_writes, mut peering_merges) = (0, 0);
            for seed in 1..seeds {
                let mut rng = crate::TestRng(seed * 0x9e37_79b9 + k as u64);
                let mut durable = vec![Held::default(); n];
                let mut current = vec![Held::default(); n];
                let mut down = vec![false; n];
                // Every version ever stashed and the stripe it wrote (a cut write may win).
                let mut written: std::collections::BTreeMap<u64, Vec<u8>> = Default::default();
                let mut stripe: Option<(u64, Vec<u8>)> = None;
                let mut acked: Option<u64> = None;
                for version in 1..=8u64 {
                    let live: Vec<usize> = (0..n).filter(|&i| !down[i]).collect();
                    if live.len() < k + 1 {
                        break;
                    }
                    // Partial only when every position is live and the stripe exists.
                    let partial = live.len() == n && stripe.is_some() && rng.below(4) != 0;
                    let (new, stashes) = if partial {
                        let (base, old_stripe) = stripe.clone().expect("stripe");
                        let blocks = k * CHUNK_BLOCKS;
                        let first = rng.below(blocks as u64) as usize;
                        let end = (first + 1 + rng.below(3) as usize).min(blocks);
                        let data = bytes((end - first) * BLOCK, &mut rng);
                        let mut new = old_stripe;
                        new[first * BLOCK..end * BLOCK].copy_from_slice(&data);
                        // The primary reads the chunks it needs; all must be at the base.
                        let old: Vec<Vec<u8>> = (0..n)
                            .map(|i| {
                                let (v, c) = current[i].committed.clone().expect("chunk");
                                assert_eq!(v, base, "{k}+{m} seed {seed}: read at {v}");
                                c
                            })
                            .collect();
                        let s = partial_stashes(&scheme, &old, (first, end), &data, version, base);
                        partial_writes += 1;
                        (new, s.into_iter().map(Err).collect::<Vec<_>>())
                    } else {
                        let new = bytes(stripe_bytes, &mut rng);
                        let chunks = scheme.encode(&new).expect("encode");
                        (new, chunks.into_iter().map(Ok).collect())
                    };
                    written.insert(version, new.clone());
                    let steps = 2 * live.len() + 1;
                    let crash_at = rng.below(steps as u64 + 3) as usize;
                    let mut step = 0;
                    let mut crashed = false;
                    for &i in &live {
                        if step == crash_at {
                            crashed = true;
                            break;
                        }
                        match &stashes[i] {
                            Ok(chunk) => current[i].stash = Some((version, chunk.clone())),
                            Err(p) => {
                                let base = current[i].committed.as_ref().map(|c| c.0);
                                assert_eq!(base, Some(p.0.base), "a member refuses (Stale)");
                                current[i].stash = None;
                                current[i].partial = Some(p.clone());
                            }
                        }
                        // The stash's flush makes everything before it durable too.
                        durable[i] = current[i].clone();
                        step += 1;
                    }
                    if !crashed {
                        acked = Some(version);
                        stripe = Some((version, new));
                        for &i in &live {
                            if step == crash_at {
                                crashed = true;
                                break;
                            }
                            if current[i].partial.is_some() {
                                current[i].merge();
                            } else {
                                current[i].committed = current[i].stash.take();
                            }
                            if rng.below(2) == 0 {
                                durable[i] = current[i].clone();
                            }
                            step += 1;
                        }
                    }
                    if !(crashed || rng.below(3) == 0) {
                        continue;
                    }
                    // Power cut: only what is durable stays; up to m positions lost.
                    current = durable.clone();
                    for _ in 0..rng.below(m as u64 + 1) {
                        let i = rng.below(n as u64) as usize;
                        if down.iter().filter(|d| **d).count() < m {
                            down[i] = true;
                        }
                    }
                    let view: Vec<Option<PositionState>> = (0..n)
                        .map(|i| (!down[i]).then(|| current[i].state()))
                        .collect();
                    let plan = decide(k, &view);
                    let what = format!("{k}+{m} seed {seed} v{version}: {plan:?} {view:?}");
                    assert_eq!(plan.unfound, None, "{what}");
                    if let Some(a) = acked {
                        assert!(plan.target >= Some(a), "acked v{a} lost: {what}");
                    }
                    // Apply the plan as peering does, then rebuild from k holders.
                    for &i in &plan.promote {
                        current[i].committed = current[i].stash.take();
                    }
                    for &i in &plan.merge {
                        current[i].merge();
                        peering_merges += 1;
                    }
                    for &i in &plan.drop_stash {
                        current[i].stash = None;
                    }
                    for &i in &plan.drop_partial {
                        current[i].partial = None;
                    }
                    for &i in &plan.delete {
                        current[i].committed = None;
                    }
                    let Some(t) = plan.target else {
                        current = vec![Held::default(); n];
                        durable = current.clone();
                        stripe = None;
                        acked = None;
                        down.iter_mut().for_each(|d| *d = false);
                        continue;
                    };
                    let holders: Vec<usize> = (0..n)
                        .filter(|&i| {
                            !down[i] && current[i].committed.as_ref().is_some_and(|c| c.0 == t)
                        })
                        .collect();
                    assert!(
                        holders.len() >= k,
                        "{what}: {} hold the target",
                        holders.len()
                    );
                    // Any k holders decode the same stripe: the one version t wrote.
                    let pick: Vec<usize> = {
                        let skip = rng.below((holders.len() - k + 1) as u64) as usize;
                        holders[skip..skip + k].to_vec()
                    };
                    let avail: Vec<Option<&[u8]>> = (0..n)
                        .map(|i| {
                            pick.contains(&i)
                                .then(|| &current[i].committed.as_ref().expect("held").1[..])
                        })
                        .collect();
                    let decoded = scheme.decode(&avail).expect("decode");
                    assert!(decoded == written[&t], "{what}: k chunks decode to a mix");
                    let chunks = scheme.encode(&decoded).expect("encode");
                    for i in 0..n {
                        if down[i] && rng.below(2) == 0 {
                            down[i] = false; // replaced: comes back empty, rebuilt below
                        }
                        if !down[i] {
                            let c = &current[i].committed;
                            if c.as_ref().is_some_and(|c| c.0 == t) {
                                let held = &c.as_ref().expect("held").1;
                                assert!(*held == chunks[i], "{what}: position {i} holds a mix");
                            }
                            current[i] = Held {
                                committed: Some((t, chunks[i].clone())),
                                ..Held::default()
                            };
                        }
                    }
                    durable = current.clone();
                    stripe = Some((t, decoded));
                    acked = Some(t);
                }
            }
            // The run reached what it is about: many partial writes, cut ones rolled forward.
            assert!(
                partial_writes > 100,
                "{k}+{m}: {partial_writes} partial writes"
            );
            assert!(
                peering_merges > 10,
                "{k}+{m}: {peering_merges} merges by peering"
            );
        }
    }
}
