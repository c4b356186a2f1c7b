//! The parts of a run. Each [`Section`] plans its steps (for the progress ETA), runs them
//! against the shared [`Ctx`] and returns its table; a failed step becomes a failed figure,
//! never an aborted run.

pub mod memory;
pub mod metrics_cost;
pub mod network;
pub mod nvmf;
pub mod plasmavmc;
pub mod profiles;
pub mod s3;
pub mod s3_load;
pub mod scaling;
pub mod security;
pub mod side_by_side;
pub mod strmvol;

use crate::cpu::{self, CpuSource};
use crate::fio::{self, FioTarget, Job, Span};
use crate::progress::Progress;
use crate::results::{Figure, SectionReport};
use crate::under_test::UnderTest;
use std::path::PathBuf;
use std::time::Duration;

/// One self-contained part of the benchmark (network, disk vs volume, Torus, ...).
pub trait Section {
    /// Stable id, the prefix of the section's figure keys.
    fn id(&self) -> &'static str;
    /// Planned seconds of each step, for the progress ETA (one entry per step).
    fn plan(&self, ctx: &Ctx) -> Vec<f64>;
    /// Run every step and return the section's table.
    fn run(&self, ctx: &mut Ctx) -> SectionReport;
}

/// Settings of a run that sections read.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Seconds per timed fio run.
    pub runtime_s: u32,
    /// Warm-up seconds before each timed run.
    pub ramp_s: u32,
    /// Size of the disk test file and of the Basalt volume.
    pub size_bytes: u64,
    /// Parallel jobs for the multi-job profiles (sized to the machine).
    pub jobs: u32,
    /// Queue depth per job for the deep-queue profiles.
    pub deep_iodepth: u32,
}

/// What sections share: settings, output paths, the targets and the progress display.
pub struct Ctx {
    /// Run settings.
    pub settings: Settings,
    /// The output directory (`report.md`, `results.json`, plots).
    pub out_dir: PathBuf,
    /// Where raw tool outputs go (`OUT/raw`).
    pub raw_dir: PathBuf,
    /// Scratch directory under the data directory (removed at the end of the run).
    pub work_dir: PathBuf,
    /// The disk baseline's test file.
    pub disk_file: PathBuf,
    /// Whether the disk baseline uses O_DIRECT.
    pub disk_direct: bool,
    /// The Basalt volume under test, or why there is none.
    pub cluster: Result<Box<dyn UnderTest>, String>,
    /// Progress lines and ETA.
    pub progress: Progress,
    /// TCP throughput the network section measured (MiB/s): the S3 section's baseline.
    pub network_mib_s: Option<f64>,
}

/// How large a run is: sections pick their sizes and durations by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// `--smoke`: the smallest sizes that still run every code path; the figures mean little.
    Smoke,
    /// `--quick`: short runs and small sizes.
    Quick,
    /// A full run.
    Full,
}

impl Scale {
    /// `smoke`, `quick` or `full`, by this scale.
    pub fn pick<T>(self, smoke: T, quick: T, full: T) -> T {
        match self {
            Scale::Smoke => smoke,
            Scale::Quick => quick,
            Scale::Full => full,
        }
    }
}

/// Which side of a comparison a step measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The local disk under the data directory.
    Disk,
    /// The Basalt volume through NBD.
    Basalt,
}

impl Side {
    /// Short name used in file names and progress lines.
    pub fn name(self) -> &'static str {
        match self {
            Side::Disk => "disk",
            Side::Basalt => "basalt",
        }
    }
}

/// One fio invocation: the workload, where it runs, over how much, and its time bound.
pub struct FioRun<'a> {
    /// Stem of the raw outputs: `raw/{file}.json` and `raw/{file}.stderr`.
    pub file: String,
    /// The workload.
    pub job: &'a Job,
    /// Where it runs.
    pub target: FioTarget,
    /// Bytes of the target the job covers.
    pub size_bytes: u64,
    /// Timed or once over the target.
    pub span: Span,
    /// fio is killed after this long.
    pub timeout: Duration,
}

impl Ctx {
    /// Run `job` timed on `side`, keep the raw output under `raw/{name}-{side}.json`, and
    /// (for Basalt) measure the CPU the cluster's daemons used meanwhile. The figure carries the
    /// fio summary on success and the error on failure; its value is left to the caller.
    pub fn fio_step(&mut self, name: &str, job: &Job, side: Side) -> Figure {
        let span = Span::Timed {
            runtime_s: self.settings.runtime_s,
            ramp_s: self.settings.ramp_s,
        };
        let timeout = fio::timed_bound(self.settings.runtime_s, self.settings.ramp_s);
        self.fio_on(name, job, side, span, timeout)
    }

    /// Run `job` once over the whole target (preconditioning), bounded by `timeout`.
    pub fn fio_once(&mut self, name: &str, job: &Job, side: Side, timeout: Duration) -> Figure {
        self.fio_on(name, job, side, Span::Once, timeout)
    }

    fn fio_on(
        &mut self,
        name: &str,
        job: &Job,
        side: Side,
        span: Span,
        timeout: Duration,
    ) -> Figure {
        let target = match side {
            Side::Disk => FioTarget::File {
                path: self.disk_file.clone(),
                direct: self.disk_direct,
            },
            Side::Basalt => match &self.cluster {
                Ok(c) => FioTarget::Nbd {
                    uri: c.uri().to_string(),
                },
                Err(e) => return Figure::failed(format!("no Basalt volume: {e}"), None, None),
            },
        };
        let run = FioRun {
            file: format!("{name}-{}", side.name()),
            job,
            target,
            size_bytes: self.settings.size_bytes,
            span,
            timeout,
        };
        let sources = match (side, &self.cluster) {
            (Side::Basalt, Ok(c)) => c.cpu_sources(),
            _ => Vec::new(),
        };
        self.fio(&run, &sources)
    }

    /// Run `run`, keep its raw output, and measure the CPU the daemons of `sources` used
    /// meanwhile (none for the disk baseline). A failure becomes a failed figure and a
    /// progress note; the value is left to the caller.
    pub fn fio(&self, run: &FioRun, sources: &[CpuSource]) -> Figure {
        let output = self.raw_dir.join(format!("{}.json", run.file));
        let stderr = self.raw_dir.join(format!("{}.stderr", run.file));
        let raw = Some(format!("raw/{}.json", run.file));
        let args = fio::args(run.job, &run.target, run.size_bytes, run.span, &output);
        let command = Some(fio::command_line(&args));
        if crate::interrupt::requested() {
            return Figure::failed(crate::interrupt::MESSAGE, command, None);
        }
        let before = cpu::sample(sources);
        match fio::run(&args, &output, &stderr, run.timeout) {
            Ok(summary) => {
                let after = cpu::sample(sources);
                let cpu = cpu::cost(&before, &after, summary.io_bytes, summary.total_ios);
                Figure {
                    command,
                    raw,
                    fio: Some(summary),
                    cpu,
                    ..Figure::default()
                }
            }
            Err(e) => {
                let msg = format!("{e:#}");
                self.progress.note(&format!("failed: {msg}"));
                Figure::failed(msg, command, raw)
            }
        }
    }
}

/// Run `cmd` to completion within `timeout`; its stdout, or an error carrying its stderr.
pub(crate) fn run_ok(cmd: &mut std::process::Command, timeout: Duration) -> anyhow::Result<String> {
    use anyhow::{bail, Context};
    use std::io::Read;
    use std::process::Stdio;
    use std::time::Instant;
    let name = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("start {name}"))?;
    let mut out = child.stdout.take().context("child stdout")?;
    let mut err = child.stderr.take().context("child stderr")?;
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let deadline = Instant::now() + timeout;
    // Bound: `timeout`.
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{name} did not finish within {} s", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = String::from_utf8_lossy(&out_t.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_t.join().unwrap_or_default()).into_owned();
    if !status.success() {
        bail!("{name} failed ({status}): {}", stderr.trim());
    }
    Ok(stdout)
}
