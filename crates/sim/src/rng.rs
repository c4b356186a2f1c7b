//! The simulator's one source of randomness: a small seeded generator (SplitMix64), so a
//! seed names a run exactly.

/// A seeded pseudo-random generator.
#[derive(Clone, Debug)]
pub struct SimRng(u64);

impl SimRng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        SimRng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        self.next_u64() % n
    }

    /// A number in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A generator for a sub-component, independent of how much this one is used later.
    pub fn fork(&mut self) -> SimRng {
        SimRng::new(self.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: one seed, one sequence; another seed, another sequence.
    #[test]
    fn a_seed_names_a_sequence() {
        let a: Vec<u64> = (0..5)
            .map({
                let mut r = SimRng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let mut r = SimRng::new(7);
        assert_eq!(a, (0..5).map(|_| r.next_u64()).collect::<Vec<_>>());
        let mut other = SimRng::new(8);
        assert_ne!(a[0], other.next_u64());
        assert!((0..1000).all(|_| r.between(3, 5) >= 3 && r.between(3, 5) <= 5));
    }
}
