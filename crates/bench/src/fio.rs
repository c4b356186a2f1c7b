//! fio jobs: the command line for a profile on a target, a bounded run, and the JSON parser.

use crate::results::FioSummary;
use anyhow::{bail, Context};
use basalt_proto::size::format_size;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Extra time a fio run may take beyond its runtime (start-up, file layout, connection).
pub const FIO_SLACK: Duration = Duration::from_secs(120);
/// Percentiles fio is asked for (and the latency plot shows).
pub const PERCENTILES: &str = "1:5:10:20:30:40:50:60:70:80:90:95:99:99.5:99.9:99.95:99.99";
/// Assumed lower bound of sequential write speed, to bound preconditioning (bytes/s).
pub const PRECONDITION_MIN_BYTES_PER_S: u64 = 20 << 20;
/// Preconditioning: write the whole target once in 1M blocks, so reads find written data.
pub const FILL: Job = Job {
    rw: "write",
    bs: "1M",
    iodepth: 8,
    numjobs: 1,
    rwmixread: None,
};

/// One fio workload, independent of where it runs.
#[derive(Clone, Debug)]
pub struct Job {
    /// fio `rw=` (`read`, `write`, `randread`, `randwrite`, `randrw`).
    pub rw: &'static str,
    /// Block size (`4k`, `1M`).
    pub bs: &'static str,
    /// Queue depth per job.
    pub iodepth: u32,
    /// Parallel jobs (threads), reported as one group.
    pub numjobs: u32,
    /// Read share of a `randrw` mix, percent.
    pub rwmixread: Option<u32>,
}

/// Where a job runs.
#[derive(Clone, Debug)]
pub enum FioTarget {
    /// A file on the local disk through libaio.
    File {
        /// The test file (laid out by fio on first use).
        path: PathBuf,
        /// Whether O_DIRECT (`direct=1`) is used.
        direct: bool,
    },
    /// An NBD export through fio's nbd engine.
    Nbd {
        /// `nbd://host:port/export`.
        uri: String,
    },
}

/// How long a job runs.
#[derive(Clone, Copy, Debug)]
pub enum Span {
    /// Time-based: `runtime` seconds after `ramp` seconds of warm-up.
    Timed {
        /// Measured seconds.
        runtime_s: u32,
        /// Warm-up seconds, not measured.
        ramp_s: u32,
    },
    /// Until `size` bytes were moved once (preconditioning).
    Once,
}

/// How long a timed run may take before it is killed.
pub fn timed_bound(runtime_s: u32, ramp_s: u32) -> Duration {
    Duration::from_secs(u64::from(runtime_s + ramp_s)) + FIO_SLACK
}

/// How long [`FILL`] over `size_bytes` may take before it is killed.
pub fn fill_bound(size_bytes: u64) -> Duration {
    Duration::from_secs(size_bytes / PRECONDITION_MIN_BYTES_PER_S) + FIO_SLACK
}

/// The full fio argument list (without the program name) for `job` on `target`.
pub fn args(job: &Job, target: &FioTarget, size: u64, span: Span, output: &Path) -> Vec<String> {
    let mut a = vec![
        "--name=bench".to_string(),
        format!("--rw={}", job.rw),
        format!("--bs={}", job.bs),
        format!("--iodepth={}", job.iodepth),
        format!("--numjobs={}", job.numjobs),
        format!("--size={}", format_size(size)),
    ];
    if let Some(mix) = job.rwmixread {
        a.push(format!("--rwmixread={mix}"));
    }
    match target {
        FioTarget::File { path, direct } => {
            a.push("--ioengine=libaio".into());
            a.push(format!("--direct={}", u8::from(*direct)));
            a.push(format!("--filename={}", path.display()));
        }
        FioTarget::Nbd { uri } => {
            a.push("--ioengine=nbd".into());
            a.push(format!("--uri={uri}"));
        }
    }
    a.extend(
        [
            "--thread",
            "--group_reporting",
            "--randrepeat=0",
            "--norandommap",
            "--output-format=json",
        ]
        .map(String::from),
    );
    a.push(format!("--percentile_list={PERCENTILES}"));
    if let Span::Timed { runtime_s, ramp_s } = span {
        a.push("--time_based".into());
        a.push(format!("--runtime={runtime_s}"));
        if ramp_s > 0 {
            a.push(format!("--ramp_time={ramp_s}"));
        }
    }
    a.push(format!("--output={}", output.display()));
    a
}

/// The command line as a person would type it.
pub fn command_line(args: &[String]) -> String {
    std::iter::once("fio".to_string())
        .chain(args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Run fio with `args`, killing it after `timeout`; stderr goes to `stderr_path`.
/// Returns the parsed JSON output file.
pub fn run(
    args: &[String],
    output: &Path,
    stderr_path: &Path,
    timeout: Duration,
) -> anyhow::Result<FioSummary> {
    let stderr = std::fs::File::create(stderr_path)
        .with_context(|| format!("create {}", stderr_path.display()))?;
    let mut child = Command::new("fio")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .context("start fio")?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().context("wait for fio")? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("fio did not finish within {} s; killed", timeout.as_secs());
        }
        if crate::interrupt::requested() {
            let _ = child.kill();
            let _ = child.wait();
            bail!(crate::interrupt::MESSAGE);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // fio stops early and reports what it did when Ctrl-C reaches it too: not a figure.
    if crate::interrupt::requested() {
        bail!(crate::interrupt::MESSAGE);
    }
    if !status.success() {
        let err = std::fs::read_to_string(stderr_path).unwrap_or_default();
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        bail!("fio exited with {status}: {}", last.trim());
    }
    let text = std::fs::read_to_string(output)
        .with_context(|| format!("read fio output {}", output.display()))?;
    parse(&text).with_context(|| format!("parse fio output {}", output.display()))
}

/// Parse fio's JSON output. fio's nbd engine writes "fio: connected to NBD server" into the
/// output file before the JSON, so parsing starts at the first `{`.
pub fn parse(text: &str) -> anyhow::Result<FioSummary> {
    let start = text.find('{').context("no JSON object in fio output")?;
    let json: serde_json::Value = serde_json::from_str(&text[start..]).context("fio JSON")?;
    let job = json
        .get("jobs")
        .and_then(|j| j.get(0))
        .context("fio JSON has no jobs")?;
    if let Some(e) = job.get("error").and_then(|e| e.as_i64()) {
        if e != 0 {
            bail!("fio job reported error {e}");
        }
    }
    let f = |dir: &str, field: &str| job[dir][field].as_f64().unwrap_or(0.0);
    let u = |dir: &str, field: &str| job[dir][field].as_u64().unwrap_or(0);
    let read_ios = u("read", "total_ios");
    let write_ios = u("write", "total_ios");
    // The latency plot shows the direction that carried most IOs.
    let main = if read_ios >= write_ios {
        "read"
    } else {
        "write"
    };
    let mut clat: Vec<(f64, f64)> = job[main]["clat_ns"]["percentile"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.parse::<f64>().ok()?, v.as_f64()? / 1000.0)))
                .collect()
        })
        .unwrap_or_default();
    clat.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(FioSummary {
        read_iops: f("read", "iops"),
        write_iops: f("write", "iops"),
        read_mib_s: f("read", "bw_bytes") / (1u64 << 20) as f64,
        write_mib_s: f("write", "bw_bytes") / (1u64 << 20) as f64,
        read_lat_mean_us: job["read"]["lat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1000.0,
        write_lat_mean_us: job["write"]["lat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1000.0,
        io_bytes: u("read", "io_bytes") + u("write", "io_bytes"),
        total_ios: read_ios + write_ios,
        clat_percentiles_us: clat,
    })
}

/// `fio --version`, if fio is installed.
pub fn version() -> Option<String> {
    let out = Command::new("fio").arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real fio 3.33 JSON output (libaio, 4k randrw 75/25, QD4, 1 s on ext4).
    const SAMPLE: &str = include_str!("testdata/fio_randrw_libaio.json");

    #[test]
    fn parses_a_captured_fio_output() {
        // Goal: the figures the report uses come out of a real fio JSON file.
        let s = parse(SAMPLE).unwrap();
        assert!(s.read_iops > 0.0 && s.write_iops > 0.0);
        assert!(s.read_iops > s.write_iops, "75/25 mix reads more");
        assert!(s.read_mib_s > 0.0 && s.write_mib_s > 0.0);
        assert!(s.read_lat_mean_us > 0.0 && s.write_lat_mean_us > 0.0);
        assert!(s.io_bytes >= s.total_ios * 4096 && s.total_ios > 0);
        assert_eq!(s.clat_percentiles_us.len(), 17);
        let p: Vec<f64> = s.clat_percentiles_us.iter().map(|x| x.0).collect();
        assert_eq!(p.first(), Some(&1.0));
        assert_eq!(p.last(), Some(&99.99));
        assert!(s
            .clat_percentiles_us
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
    }

    #[test]
    fn skips_the_nbd_engine_banner() {
        // Goal: the line fio's nbd engine prints before the JSON does not break parsing.
        let text = format!("fio: connected to NBD server\n{SAMPLE}");
        let s = parse(&text).unwrap();
        assert_eq!(s.total_ios, parse(SAMPLE).unwrap().total_ios);
    }

    #[test]
    fn rejects_output_without_json() {
        // Goal: a truncated or empty output is an error, not a zero figure.
        assert!(parse("fio: connected to NBD server\n").is_err());
        assert!(parse("{\"jobs\": []}").is_err());
        assert!(parse("{\"jobs\": [{\"error\": 5}]}").is_err());
    }

    #[test]
    fn command_lines_name_engine_and_target() {
        // Goal: the recorded command line is what fio runs, with engine and target.
        let job = Job {
            rw: "randread",
            bs: "4k",
            iodepth: 32,
            numjobs: 1,
            rwmixread: None,
        };
        let nbd = FioTarget::Nbd {
            uri: "nbd://127.0.0.1:1/bench".into(),
        };
        let span = Span::Timed {
            runtime_s: 3,
            ramp_s: 0,
        };
        let a = args(&job, &nbd, 256 << 20, span, Path::new("o.json"));
        let line = command_line(&a);
        assert!(line.starts_with("fio --name=bench --rw=randread --bs=4k --iodepth=32"));
        assert!(line.contains("--ioengine=nbd --uri=nbd://127.0.0.1:1/bench"));
        assert!(line.contains("--size=256M") && line.contains("--runtime=3"));
        assert!(!line.contains("--ramp_time"));
        assert!(line.ends_with("--output=o.json"));
        let file = FioTarget::File {
            path: "/d/f".into(),
            direct: false,
        };
        let line = command_line(&args(&job, &file, 1 << 30, Span::Once, Path::new("o")));
        assert!(line.contains("--ioengine=libaio --direct=0 --filename=/d/f"));
        assert!(!line.contains("--time_based"));
    }
}
