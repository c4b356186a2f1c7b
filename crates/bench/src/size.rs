//! Sizes as people type them (`256M`, `2G`) and as the report prints them.

use anyhow::{bail, Context};

/// Parse `512`, `64K`, `256M`, `2G`, `1T` (binary units, optional trailing `B`/`iB`).
pub fn parse_size(text: &str) -> anyhow::Result<u64> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        Some('T' | 't') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = digits
        .trim()
        .parse()
        .with_context(|| format!("parse size {text:?}"))?;
    match n.checked_mul(1u64 << shift) {
        Some(v) if v > 0 => Ok(v),
        _ => bail!("size {text:?} is zero or too large"),
    }
}

/// Format bytes with the largest binary unit that divides them evenly (for fio and basalt).
pub fn exact(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Format bytes for people: `1.5 GiB`.
pub fn human(bytes: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", units[i])
    } else {
        format!("{v:.1} {}", units[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_trip() {
        // Goal: the units people type parse to bytes and print back exactly.
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("0").is_err());
        assert!(parse_size("x").is_err());
        assert_eq!(exact(256 << 20), "256M");
        assert_eq!(exact(3 << 30), "3G");
        assert_eq!(exact(1000), "1000");
        assert_eq!(human(1536.0 * 1024.0 * 1024.0), "1.5 GiB");
    }
}
