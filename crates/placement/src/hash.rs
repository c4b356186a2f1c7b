//! Stable 64-bit hashing for placement. Never change these functions: every stored object's
//! location depends on them.

/// The splitmix64 finaliser: a fast, well-mixed bijection on u64.
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Hash two values into one.
pub fn hash2(a: u64, b: u64) -> u64 {
    mix64(mix64(a) ^ b.rotate_left(17))
}
