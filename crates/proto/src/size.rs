//! Sizes in bytes as people type them (`512M`, `1.5G`, `2GiB`), as command lines take them
//! back (`256M`), and as people read them (`1.5 GiB`). Binary units throughout: K = 1024.
//! The one parser and the one formatter of the workspace: every command, daemon option and
//! report goes through these.

/// Binary unit suffixes and their powers of two, largest first.
const UNITS: [(char, u32); 4] = [('T', 40), ('G', 30), ('M', 20), ('K', 10)];

/// A size that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid size \"{text}\": expected a number with an optional K, M, G or T suffix")]
pub struct ParseSizeError {
    /// What was given.
    pub text: String,
}

/// Parse a size like `4096`, `64K`, `512M`, `10g`, `1.5T`, `2GiB`, `2Gi` or `8MB` (binary units
/// whatever the spelling). A fraction must come out as whole bytes. Zero parses; callers that
/// need a positive size check it.
pub fn parse_size(text: &str) -> Result<u64, ParseSizeError> {
    let invalid = || ParseSizeError {
        text: text.to_string(),
    };
    let upper = text.trim().to_ascii_uppercase();
    let t = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .or_else(|| upper.strip_suffix('I'))
        .unwrap_or(&upper);
    let (num, shift) = match t.chars().last() {
        Some(c) => match UNITS.iter().find(|(unit, _)| *unit == c) {
            Some(&(_, shift)) => (&t[..t.len() - 1], shift),
            None => (t, 0),
        },
        None => (t, 0),
    };
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(invalid());
    }
    let mult = 1u64 << shift;
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(invalid);
    }
    let f: f64 = num.parse().map_err(|_| invalid())?;
    let bytes = f * mult as f64;
    if !(bytes.is_finite() && bytes < u64::MAX as f64) || bytes.fract() != 0.0 {
        return Err(invalid());
    }
    Ok(bytes as u64)
}

/// `bytes` spelled with the largest binary unit that divides it evenly (`256M`, `3G`, `1000`):
/// what [`parse_size`] reads back exactly, for the command lines of fio and `basalt`.
pub fn format_size(bytes: u64) -> String {
    for (unit, shift) in UNITS {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// `bytes` for people: `512 B`, `4.0 KiB`, `1.5 GiB` (one decimal from KiB up).
pub fn human_bytes(bytes: u64) -> String {
    const NAMES: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < NAMES.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", NAMES[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: every spelling people type parses to the bytes meant, and bad ones are refused
    /// with the message users see.
    #[test]
    fn sizes_parse() {
        for (text, bytes) in [
            ("4096", 4096),
            ("0", 0),
            ("64K", 64 << 10),
            ("10G", 10 << 30),
            ("10g", 10 << 30),
            ("512M", 512 << 20),
            (" 512M ", 512 << 20),
            ("1.5K", 1536),
            ("1.5G", 3 << 29),
            ("2GiB", 2 << 30),
            ("2Gi", 2 << 30),
            ("4KiB", 4096),
            ("8MB", 8 << 20),
            ("1T", 1 << 40),
            ("16777215T", 16_777_215 << 40),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for bad in [
            "",
            "G",
            "x",
            "-1",
            "1.1",
            "..5K",
            "99999999999999999999T",
            "16777216T",
            "1Q",
            "1e3",
            "1 G",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_size("abc").unwrap_err().to_string(),
            "invalid size \"abc\": expected a number with an optional K, M, G or T suffix"
        );
    }

    /// Goal: the command-line spelling is exact and reads back to the same bytes.
    #[test]
    fn format_size_round_trips() {
        assert_eq!(format_size(256 << 20), "256M");
        assert_eq!(format_size(3 << 30), "3G");
        assert_eq!(format_size(1536), "1536");
        assert_eq!(format_size(128 << 10), "128K");
        assert_eq!(format_size(1 << 40), "1T");
        assert_eq!(format_size(1000), "1000");
        assert_eq!(format_size(0), "0");
        for bytes in [
            0,
            1,
            1023,
            1024,
            4096,
            1536,
            3 << 29,
            (1 << 40) + 4096,
            u64::MAX >> 24,
        ] {
            assert_eq!(parse_size(&format_size(bytes)), Ok(bytes), "{bytes}");
        }
    }

    /// Goal: sizes read for people carry one decimal and the largest binary unit below them.
    #[test]
    fn human_bytes_reads_well() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.0 KiB");
        assert_eq!(human_bytes(128 << 10), "128.0 KiB");
        assert_eq!(human_bytes(4 << 20), "4.0 MiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes(10 << 30), "10.0 GiB");
        assert_eq!(human_bytes(1 << 40), "1.0 TiB");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
    }
}
