//! CPU time and resident memory of a process, from `/proc/PID/stat`: what the benchmark
//! charges to a local `basalt up`, and what every daemon's `/metrics` exports as the standard
//! `process_cpu_seconds_total` and `process_resident_memory_bytes`.
//!
//! The parsing is the `procfs` crate's; this module keeps the few numbers the benchmark and
//! the metrics use, in seconds and bytes.

use anyhow::Context;
use procfs::{FromBufReadSI, FromRead, WithCurrentSystemInfo};

/// Clock ticks per second of the times in /proc (`sysconf(_SC_CLK_TCK)`).
pub fn clock_ticks_per_second() -> f64 {
    procfs::ticks_per_second() as f64
}

/// What /proc/PID/stat says of a process's CPU time and memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcStat {
    /// utime + stime of every thread, live or exited, in seconds.
    pub cpu_seconds: f64,
    /// Resident set size in bytes.
    pub resident_bytes: u64,
}

/// CPU time and resident memory of process `pid`.
pub fn read(pid: u32) -> anyhow::Result<ProcStat> {
    let pid_i32 = i32::try_from(pid).with_context(|| format!("pid {pid} out of range"))?;
    let stat = procfs::process::Process::new(pid_i32)
        .and_then(|p| p.stat())
        .with_context(|| format!("read /proc/{pid}/stat"))?;
    Ok(ProcStat {
        cpu_seconds: (stat.utime + stat.stime) as f64 / clock_ticks_per_second(),
        resident_bytes: stat.rss_bytes().get(),
    })
}

/// CPU seconds (utime + stime, all threads) of process `pid`.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    Ok(read(pid)?.cpu_seconds)
}

/// The raw counters of /proc/PID/stat the benchmark uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFields {
    /// utime + stime in clock ticks.
    pub cpu_ticks: u64,
    /// Resident set size in pages.
    pub rss_pages: u64,
}

/// utime + stime and rss from the text of /proc/PID/stat (the command name may hold spaces
/// and parentheses).
pub fn parse_stat(stat: &str) -> anyhow::Result<StatFields> {
    // procfs slices around the parentheses of the name by index: text not shaped as
    // `PID (NAME) STATE ...` is refused here rather than left to it.
    let (pid, rest) = stat.split_once(" (").context("no \" (\" after the pid")?;
    pid.parse::<u32>()
        .with_context(|| format!("bad pid {pid:?}"))?;
    anyhow::ensure!(rest.contains(") "), "no \") \" after the name");
    let stat = procfs::process::Stat::from_read(stat.as_bytes())?;
    Ok(StatFields {
        cpu_ticks: stat.utime + stat.stime,
        rss_pages: stat.rss,
    })
}

/// CPU seconds the whole machine spent busy since boot, all cores together (every field of
/// the `cpu` line of /proc/stat but idle and iowait): what a step's processes did not use of
/// it is other processes' load on a shared machine.
pub fn machine_busy_seconds() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat").context("read /proc/stat")?;
    let ticks = parse_machine_busy_ticks(&stat).context("parse /proc/stat")?;
    Ok(ticks as f64 / clock_ticks_per_second())
}

/// user + nice + system + irq + softirq + steal ticks from the text of /proc/stat (guest
/// time is already in user and nice).
pub fn parse_machine_busy_ticks(stat: &str) -> anyhow::Result<u64> {
    let stats = procfs::KernelStats::from_buf_read(stat.as_bytes(), procfs::current_system_info())?;
    let t = stats.total;
    let (Some(irq), Some(softirq), Some(steal)) = (t.irq, t.softirq, t.steal) else {
        anyhow::bail!("fewer than 8 fields in the cpu line");
    };
    Ok(t.user + t.nice + t.system + irq + softirq + steal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_with_odd_names() {
        // Goal: utime + stime and rss are found even when the command name holds ") (".
        let stat = "1234 (bas) (t) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 \
                    5000 123456789 777 18446744073709551615 94114831228928 94114831248809 \
                    140723729768512 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 94114831264816 \
                    94114831266432 94114995326976 140723729771122 140723729771142 \
                    140723729771142 140723729772523 0\n";
        let f = parse_stat(stat).unwrap();
        assert_eq!(f.cpu_ticks, 325);
        assert_eq!(f.rss_pages, 777);
        // Short, shapeless or truncated text is an error, never a panic.
        for bad in ["1 (x) S 1", "", "(x) S 1", "1 (x)", "x (y) S 1", "1 (x) S"] {
            assert!(parse_stat(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn parses_machine_busy_time() {
        // Goal: busy time is every field of the all-cores line but idle and iowait; per-core
        // lines and a short line are not taken for it.
        let tail = "intr 5\nctxt 123\nbtime 1700000000\nprocesses 99\nprocs_running 1\n\
                    procs_blocked 0\n";
        let stat = format!("cpu  100 5 50 9000 40 3 2 1 7 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n{tail}");
        assert_eq!(parse_machine_busy_ticks(&stat).unwrap(), 161);
        assert!(parse_machine_busy_ticks(&format!("cpu  1 2 3\n{tail}")).is_err());
        assert!(parse_machine_busy_ticks(&format!("cpu  1 2 3 4 5 6\n{tail}")).is_err());
        assert!(parse_machine_busy_ticks(&format!("cpu0 1 2 3 4 5 6 7 8\n{tail}")).is_err());
        assert!(machine_busy_seconds().unwrap() > 0.0);
    }

    #[test]
    fn reads_own_process() {
        // Goal: the /proc reader works on a live process (this test): it sees its memory,
        // and its CPU time grows while it works.
        let pid = std::process::id();
        let s = read(pid).unwrap();
        assert!(s.resident_bytes > 0);
        // Work until the CPU time moves on by a clock tick (bounded: a tick is 10 ms of
        // CPU; the bound is far beyond it, so hitting it means the reader is stuck).
        let mut x = 1u64;
        let mut rounds = 0u32;
        while cpu_seconds(pid).unwrap() <= s.cpu_seconds && rounds < MAX_BUSY_ROUNDS {
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
            }
            rounds += 1;
        }
        let after = cpu_seconds(pid).unwrap();
        assert!(
            after > s.cpu_seconds,
            "{} -> {after} after {rounds} rounds",
            s.cpu_seconds
        );
    }

    /// Rounds of a million multiplications (about 1 ms each) before the CPU time of
    /// [`reads_own_process`] must have grown.
    const MAX_BUSY_ROUNDS: u32 = 100_000;
}
