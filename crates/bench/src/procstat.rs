//! CPU time and resident memory of a process, from `/proc/PID/stat`: what the benchmark
//! charges to a local `basalt up`, and what every daemon's `/metrics` exports as the standard
//! `process_cpu_seconds_total` and `process_resident_memory_bytes`.

use anyhow::Context;

/// Clock ticks per second of the times in /proc (`sysconf(_SC_CLK_TCK)`; 100, the value on
/// every Linux platform, if sysconf fails).
pub fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

/// Bytes of a memory page (`sysconf(_SC_PAGESIZE)`; 4096 if sysconf fails).
fn page_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        page as u64
    } else {
        4096
    }
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
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    let fields = parse_stat(&stat).with_context(|| format!("parse {path}"))?;
    Ok(ProcStat {
        cpu_seconds: fields.cpu_ticks as f64 / clock_ticks_per_second(),
        resident_bytes: fields.rss_pages * page_bytes(),
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

/// utime + stime and rss from the text of /proc/PID/stat. The command name (field 2) may
/// contain spaces and parentheses, so fields are counted after the last `)`.
pub fn parse_stat(stat: &str) -> anyhow::Result<StatFields> {
    let rest = &stat[stat.rfind(')').context("no ')' in stat")? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name, state is field 3: utime (14), stime (15) and rss (24) are at 11, 12
    // and 21.
    let field = |i: usize, name: &str| -> anyhow::Result<u64> {
        fields
            .get(i)
            .with_context(|| format!("no {name}"))?
            .parse()
            .with_context(|| format!("bad {name}"))
    };
    Ok(StatFields {
        cpu_ticks: field(11, "utime")? + field(12, "stime")?,
        rss_pages: field(21, "rss")?,
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
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("no cpu line")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().context("bad cpu field"))
        .collect::<anyhow::Result<_>>()?;
    // user nice system idle iowait irq softirq steal
    let [user, nice, system, _idle, _iowait, irq, softirq, steal, ..] = fields[..] else {
        anyhow::bail!("fewer than 8 fields in the cpu line");
    };
    Ok(user + nice + system + irq + softirq + steal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_with_odd_names() {
        // Goal: utime + stime and rss are found even when the command name holds ") (".
        let stat = "1234 (bas) (t) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 \
                    5000 123456789 777 18446744073709551615";
        let f = parse_stat(stat).unwrap();
        assert_eq!(f.cpu_ticks, 325);
        assert_eq!(f.rss_pages, 777);
        assert!(parse_stat("1 (x) S 1").is_err());
    }

    #[test]
    fn parses_machine_busy_time() {
        // Goal: busy time is every field of the all-cores line but idle and iowait; per-core
        // lines and a short line are not taken for it.
        let stat = "cpu  100 5 50 9000 40 3 2 1 7 0\ncpu0 1 1 1 1 1 1 1 1 0 0\nintr 5\n";
        assert_eq!(parse_machine_busy_ticks(stat).unwrap(), 161);
        assert!(parse_machine_busy_ticks("cpu  1 2 3\n").is_err());
        assert!(parse_machine_busy_ticks("cpu0 1 2 3 4 5 6 7 8\n").is_err());
        assert!(machine_busy_seconds().unwrap() > 0.0);
    }

    #[test]
    fn reads_own_process() {
        // Goal: the /proc reader works on a live process (this test) and sees its memory.
        let s = read(std::process::id()).unwrap();
        assert!(s.cpu_seconds >= 0.0);
        assert!(s.resident_bytes > 0);
        assert!(cpu_seconds(std::process::id()).unwrap() >= 0.0);
    }
}
