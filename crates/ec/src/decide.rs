//! The peering decision for one stripe after a crash (docs/design.md, "Writes: two phases
//! with a stash" and the proof sketch): roll the newest write forward, roll it back, or
//! declare the stripe unfound. Pure, so it is table-tested here and model-tested later.

/// A write's version as the PG assigned it (`(interval, counter)` packed so it orders).
pub type StripeVersion = u64;

/// What peering found at one live position of a stripe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PositionState {
    /// Version of the committed chunk (None: the position holds no committed chunk).
    pub committed: Option<StripeVersion>,
    /// A stashed chunk awaiting commit: its write's version and that write's stripe map.
    pub stash: Option<(StripeVersion, StripeMap)>,
}

/// For the stripe state a write V produced: the version each position's chunk must have to
/// belong to it (data chunks the write did not touch keep older versions; parity is always
/// V). Every stashed chunk carries the map of its write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StripeMap(pub Vec<StripeVersion>);

/// What peering does with a stripe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No stash is pending: nothing to do.
    Clean,
    /// Write `version` survives on at least k positions: rebuild the missing chunks and
    /// commit it everywhere.
    Forward { version: StripeVersion },
    /// Write `version` reached too few positions and none committed it: delete its stashes;
    /// the committed chunks are the previous state.
    Back { version: StripeVersion },
    /// Some position committed `version` but fewer than k of its chunks survive: more was
    /// lost than the code tolerates. Reads fail (EIO); never served from the older state.
    Unfound { version: StripeVersion },
}

/// Decide for one stripe of a `k`-of-`positions.len()` code from the live positions' states
/// (`None`: the position is down or its OSD is new).
pub fn decide(k: usize, positions: &[Option<PositionState>]) -> Decision {
    let live = || positions.iter().flatten();
    // The newest write with a stash anywhere, and its map (every stash of it carries the same).
    let Some((version, map)) = live()
        .filter_map(|p| p.stash.as_ref())
        .max_by_key(|(v, _)| *v)
        .map(|(v, m)| (*v, m.clone()))
    else {
        return Decision::Clean;
    };
    let belongs = |i: usize, p: &PositionState| {
        let Some(&want) = map.0.get(i) else {
            return false;
        };
        p.committed == Some(want) || p.stash.as_ref().is_some_and(|(v, _)| *v == want)
    };
    let have = positions
        .iter()
        .enumerate()
        .filter(|(i, p)| p.as_ref().is_some_and(|p| belongs(*i, p)))
        .count();
    if have >= k {
        return Decision::Forward { version };
    }
    if live().any(|p| p.committed == Some(version)) {
        return Decision::Unfound { version };
    }
    Decision::Back { version }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2+1 stripe whose committed state is v1 everywhere, and write v2 touching data chunk 0
    /// (map: chunk 0 at v2, chunk 1 still v1, parity v2).
    fn map2() -> StripeMap {
        StripeMap(vec![2, 1, 2])
    }

    fn committed(v: u64) -> Option<PositionState> {
        Some(PositionState {
            committed: Some(v),
            stash: None,
        })
    }

    fn stashed(committed: u64) -> Option<PositionState> {
        Some(PositionState {
            committed: Some(committed),
            stash: Some((2, map2())),
        })
    }

    #[test]
    fn each_crash_point_of_a_partial_write_ends_in_one_state() {
        // Goal: for a crash at every step of a partial write, peering picks exactly one
        // outcome, and never one that would mix versions: forward only with k chunks of the
        // new state, back only when nobody committed it, unfound otherwise.
        let k = 2;
        let table: Vec<(&str, Vec<Option<PositionState>>, Decision)> = vec![
            (
                "no write",
                vec![committed(1), committed(1), committed(1)],
                Decision::Clean,
            ),
            (
                // Stash reached chunk 0 only; chunk 1 (untouched, v1) belongs to S_v2 too:
                // two chunks of the new state, so it is rebuilt (parity from them).
                "stash on the touched data chunk only",
                vec![stashed(1), committed(1), committed(1)],
                Decision::Forward { version: 2 },
            ),
            (
                "stash on the parity only, touched data chunk down",
                vec![None, committed(1), stashed(1)],
                Decision::Forward { version: 2 },
            ),
            (
                "stash on parity only, untouched chunk down",
                vec![committed(1), None, stashed(1)],
                Decision::Back { version: 2 },
            ),
            (
                "both stashes, before any commit",
                vec![stashed(1), committed(1), stashed(1)],
                Decision::Forward { version: 2 },
            ),
            (
                "parity committed, data chunk 0 stashed",
                vec![stashed(1), committed(1), committed(2)],
                Decision::Forward { version: 2 },
            ),
            (
                "committed v2 on parity, the other two positions down",
                vec![None, None, committed(2)],
                Decision::Clean,
            ),
            (
                "parity committed v2 but the only stash left is on chunk 0 and chunk 1 lost",
                vec![stashed(1), None, committed(2)],
                Decision::Forward { version: 2 },
            ),
        ];
        for (what, positions, want) in table {
            assert_eq!(decide(k, &positions), want, "{what}");
        }
    }

    #[test]
    fn a_committed_write_with_too_few_chunks_is_unfound_not_rolled_back() {
        // Goal: once a position promoted write v2, the old state is gone there; with fewer
        // than k chunks of v2 the stripe is unfound (EIO), never silently the old data.
        let positions = vec![
            Some(PositionState {
                committed: Some(2),
                stash: Some((3, StripeMap(vec![3, 1, 3]))),
            }),
            None,
            Some(PositionState {
                committed: Some(2),
                stash: None,
            }),
        ];
        // v3: chunk 0 stashed at v3; chunk 1 (must be v1) down; parity at v2, not v3.
        assert_eq!(decide(2, &positions), Decision::Back { version: 3 });
        let positions = vec![
            Some(PositionState {
                committed: Some(3),
                stash: None,
            }),
            None,
            Some(PositionState {
                committed: Some(2),
                stash: Some((3, StripeMap(vec![3, 1, 3]))),
            }),
        ];
        // Chunk 0 committed v3, parity stashed v3: two chunks of S_v3 -> forward.
        assert_eq!(decide(2, &positions), Decision::Forward { version: 3 });
        let positions = vec![
            Some(PositionState {
                committed: Some(3),
                stash: Some((4, StripeMap(vec![4, 1, 4]))),
            }),
            None,
            Some(PositionState {
                committed: Some(4),
                stash: None,
            }),
        ];
        // v4 committed on parity; chunk 0 has a v4 stash; chunk 1 (v1) is down: chunk 0's
        // stash and the parity make two chunks of S_v4 -> forward.
        assert_eq!(decide(2, &positions), Decision::Forward { version: 4 });
        let positions = vec![
            Some(PositionState {
                committed: Some(3),
                stash: Some((4, StripeMap(vec![4, 1, 4]))),
            }),
            None,
            None,
            Some(PositionState {
                committed: Some(4),
                stash: None,
            }),
        ];
        // A 3+1 code: only two chunks of S_v4 and a commit of v4 happened: unfound.
        assert_eq!(decide(3, &positions), Decision::Unfound { version: 4 });
    }
}
