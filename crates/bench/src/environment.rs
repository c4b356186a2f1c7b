//! What the run measured on: CPU, kernel, tool versions, whether the disk takes O_DIRECT.

use std::path::Path;
use std::process::{Command, Stdio};

/// CPU model name from /proc/cpuinfo.
pub fn cpu_model() -> String {
    use procfs::Current;
    procfs::CpuInfo::current()
        .ok()
        .and_then(|c| c.model_name(0).map(|m| m.trim().to_string()))
        .unwrap_or_else(|| "unknown".into())
}

/// Online CPU cores.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Kernel release.
pub fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Short git commit of the source tree Basalt was built from, if git and the tree exist.
pub fn git_commit() -> Option<String> {
    // A read-only query; the source directory is known at build time.
    let out = Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short",
            "HEAD",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

/// The full path of `tool` on PATH, if installed.
pub fn which(tool: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// First line of `tool --version`.
pub fn tool_version(tool: &str) -> Option<String> {
    let out = Command::new(tool)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(|l| l.trim().to_string())
}

/// Whether files in `dir` can be opened with O_DIRECT (tmpfs, for one, refuses).
pub fn supports_direct_io(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join(".basalt-bench-odirect-probe");
    let ok = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe)
        .is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

/// Now as RFC 3339 UTC (`2026-11-22T05:30:00Z`), without a date crate.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    utc_from_unix(secs)
}

/// Unix seconds as RFC 3339 UTC (days-from-civil inverted, Howard Hinnant's algorithm).
pub fn utc_from_unix(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_dates() {
        // Goal: timestamps in the report are correct calendar dates.
        assert_eq!(utc_from_unix(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_from_unix(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_from_unix(1_795_325_400), "2026-11-22T05:30:00Z");
    }

    #[test]
    fn probes_the_machine() {
        // Goal: the environment probes return something on Linux.
        assert!(cores() >= 1);
        assert!(!kernel().is_empty());
        assert!(which("sh").is_some());
        assert!(which("no-such-tool-basalt").is_none());
        #[cfg(target_arch = "x86_64")]
        assert_ne!(cpu_model(), "unknown", "x86 /proc/cpuinfo names the model");
    }
}
