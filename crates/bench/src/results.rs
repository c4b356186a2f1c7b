//! The machine-readable results of a run (`results.json`): every figure, how it was measured
//! and on what machine. The report, the plots and `compare` all read this model.

use serde::{Deserialize, Serialize};

/// Version of the `results.json` layout; bumped when a field changes meaning.
pub const FORMAT_VERSION: u32 = 1;

/// Everything one `basalt bench storage` run produced.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    /// Layout version ([`FORMAT_VERSION`]).
    pub format_version: u32,
    /// When the run started, UTC, RFC 3339.
    pub generated_utc: String,
    /// The command line that produced this run.
    pub command: String,
    /// Whether `--quick` (short runs, small sizes) was used.
    pub quick: bool,
    /// Wall-clock duration of the whole run in seconds.
    pub duration_s: f64,
    /// Seconds per timed fio run.
    pub runtime_s: u32,
    /// Machine, software and cluster settings.
    pub environment: Environment,
    /// Remarks about the run as a whole (failed preparation, fallbacks).
    pub notes: Vec<String>,
    /// The sections in report order.
    pub sections: Vec<SectionReport>,
}

/// The machine and software a run measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Environment {
    /// CPU model name from /proc/cpuinfo.
    pub cpu_model: String,
    /// Online CPU cores.
    pub cores: usize,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Basalt package version.
    pub basalt_version: String,
    /// Git commit of the source tree, when it could be read.
    pub git_commit: Option<String>,
    /// `fio --version`.
    pub fio_version: Option<String>,
    /// `iperf3 --version` first line, when installed.
    pub iperf3_version: Option<String>,
    /// Directory being measured (holds the Basalt data and the disk test file).
    pub data_dir: String,
    /// Whether the disk baseline used O_DIRECT (`direct=1`).
    pub disk_direct_io: bool,
    /// Size of the disk test file and of the Basalt volume, in bytes.
    pub target_size_bytes: u64,
    /// Settings of the Basalt cluster under test.
    pub pool: PoolSettings,
    /// The existing cluster measured (`--cluster etcd://...`); `None` when the run measured
    /// a `basalt up` it started itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing: Option<ExistingClusterInfo>,
    /// CPU seconds per second the measured daemons used at rest before the first step
    /// (included in every step's CPU figure, not subtracted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_cpu_seconds_per_second: Option<f64>,
}

/// An existing multi-host cluster as its map showed it when the run started.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ExistingClusterInfo {
    /// The metadata URL the run was given (`etcd://HOST:PORT[,..][/NS]`).
    pub meta_url: String,
    /// The storage hosts: the distinct addresses of the OSDs that were up.
    pub hosts: Vec<StorageHost>,
    /// OSDs in the map that were down (their CPU and network are not measured).
    pub osds_down: Vec<u32>,
    /// Remarks for the report (OSDs without `/metrics`, leftover bench volumes).
    pub notes: Vec<String>,
}

/// One storage host: an address at which OSDs serve.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageHost {
    /// The IP address of its OSDs' data plane.
    pub ip: String,
    /// Failure-domain names its OSDs registered with (usually one).
    pub names: Vec<String>,
    /// Its OSDs.
    pub osds: Vec<u32>,
}

impl StorageHost {
    /// `host1 (10.0.0.2)`, as the report names it.
    pub fn label(&self) -> String {
        if self.names.is_empty() || self.names == [self.ip.clone()] {
            self.ip.clone()
        } else {
            format!("{} ({})", self.names.join(", "), self.ip)
        }
    }
}

/// How the measured cluster and its pool were configured: as passed to `basalt up`, or read
/// from an existing cluster's map.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PoolSettings {
    /// Pool name (existing clusters; `basalt up` always makes `rbd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// OSDs in the cluster (up, for an existing cluster).
    pub osds: u32,
    /// Replicas per object.
    pub replicas: u32,
    /// Fewest live replicas that accept I/O (existing clusters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size: Option<u32>,
    /// Where two replicas never meet, `host` or `osd` (existing clusters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    /// Placement groups.
    pub pgs: u32,
    /// Object size (`128K`).
    pub object_size: String,
    /// Capacity of each OSD's store (`8G`; a range when they differ).
    pub osd_size: String,
    /// The banner line `basalt up` printed, as a cross-check.
    pub banner: Option<String>,
}

/// Whether a section was measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SectionStatus {
    /// The section ran (some of its steps may still have failed).
    Measured,
    /// The section could not run here; the reason says what is missing.
    NotMeasured {
        /// Why, and which issue will make it measurable.
        reason: String,
    },
}

/// How the report lays out a section's rows and what its baseline means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SectionLayout {
    /// Each Basalt figure beside a measured baseline (local disk, loopback TCP) and the
    /// ratio of the two.
    #[default]
    Comparison,
    /// A sweep over cluster sizes (`sections::scaling`): the baseline of a row is linear
    /// scaling of the 1-OSD figure, so the ratio is the scaling efficiency.
    Scaling,
}

/// One part of the report: a table of rows, each Basalt figure beside its baseline.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SectionReport {
    /// Stable id (`disk`, `network`, `torus`, ...), the prefix of every figure key.
    pub id: String,
    /// Heading in the report.
    pub title: String,
    /// Paragraph under the heading: what was measured and how.
    pub intro: String,
    /// Name of the baseline column (`Local disk`, ...).
    pub baseline_name: String,
    /// Measured or not.
    pub status: SectionStatus,
    /// How the rows are laid out (absent in files written before the scaling sweep).
    #[serde(default)]
    pub layout: SectionLayout,
    /// Remarks (fallbacks taken, caveats).
    pub notes: Vec<String>,
    /// The table.
    pub rows: Vec<Row>,
}

/// One line of a section's table.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// Stable key within the section (`randread_4k_qd32_iops`).
    pub key: String,
    /// What people read (`4k random read QD32`).
    pub label: String,
    /// Unit of both figures (`IOPS`, `MiB/s`, `us`, `retransmits`).
    pub unit: String,
    /// Whether a larger value is better (false for latencies).
    pub higher_is_better: bool,
    /// The baseline figure, if the row has one.
    pub baseline: Option<Figure>,
    /// The Basalt figure, if the row has one.
    pub basalt: Option<Figure>,
}

/// One measured number (or why it is missing) and how it was obtained.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Figure {
    /// The value in the row's unit; `None` when the step failed.
    pub value: Option<f64>,
    /// Why the step failed.
    pub error: Option<String>,
    /// The exact command line that measured it.
    pub command: Option<String>,
    /// Raw output file, relative to the output directory.
    pub raw: Option<String>,
    /// fio's summary of the run (for fio steps).
    pub fio: Option<FioSummary>,
    /// CPU consumed by the cluster's daemons during the step (Basalt figures only).
    pub cpu: Option<CpuCost>,
}

/// The parts of a fio run the report uses, both directions summed where it makes sense.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FioSummary {
    /// Read IOPS.
    pub read_iops: f64,
    /// Write IOPS.
    pub write_iops: f64,
    /// Read throughput, MiB/s.
    pub read_mib_s: f64,
    /// Write throughput, MiB/s.
    pub write_mib_s: f64,
    /// Mean total latency of reads, microseconds.
    pub read_lat_mean_us: f64,
    /// Mean total latency of writes, microseconds.
    pub write_lat_mean_us: f64,
    /// Bytes moved (read + write).
    pub io_bytes: u64,
    /// IOs completed (read + write).
    pub total_ios: u64,
    /// Completion latency percentiles `(percentile, microseconds)` of the main direction.
    pub clat_percentiles_us: Vec<(f64, f64)>,
}

/// CPU seconds the cluster's daemons used for one step, and per unit of work.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CpuCost {
    /// utime + stime consumed during the step by every daemon measured, seconds.
    pub cpu_seconds: f64,
    /// CPU seconds per GiB moved.
    pub per_gib: Option<f64>,
    /// CPU seconds per 1000 IOs.
    pub per_1000_ios: Option<f64>,
    /// The step's CPU seconds per daemon (`basalt up`, or each OSD and the gateway of an
    /// existing cluster), with its resident memory after the step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub daemons: Vec<DaemonCpu>,
    /// Daemons whose CPU could not be read before or after the step, with why; they are not
    /// in `cpu_seconds`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}

/// One daemon's share of a step's CPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonCpu {
    /// `basalt up`, `osd.3`, ...
    pub name: String,
    /// CPU seconds (user + system).
    pub cpu_seconds: f64,
    /// Resident memory, bytes, when known.
    pub resident_bytes: Option<u64>,
}

impl CpuCost {
    /// The cost of `cpu_seconds` spent moving `io_bytes` in `total_ios` IOs.
    pub fn new(cpu_seconds: f64, io_bytes: u64, total_ios: u64) -> CpuCost {
        let gib = io_bytes as f64 / (1u64 << 30) as f64;
        CpuCost {
            cpu_seconds,
            per_gib: (io_bytes > 0).then(|| cpu_seconds / gib),
            per_1000_ios: (total_ios > 0).then(|| cpu_seconds / (total_ios as f64 / 1000.0)),
            daemons: Vec::new(),
            missing: Vec::new(),
        }
    }
}

impl Figure {
    /// A figure for a step that failed.
    pub fn failed(
        error: impl Into<String>,
        command: Option<String>,
        raw: Option<String>,
    ) -> Figure {
        Figure {
            error: Some(error.into()),
            command,
            raw,
            ..Figure::default()
        }
    }
}

impl Row {
    /// Basalt as a percentage of the baseline, when both were measured.
    pub fn percent_of_baseline(&self) -> Option<f64> {
        let b = self.baseline.as_ref()?.value?;
        let v = self.basalt.as_ref()?.value?;
        (b > 0.0).then(|| v / b * 100.0)
    }
}

impl Results {
    /// Every figure of the run as `(key, unit, higher_is_better, value)`, in report order:
    /// `section/row/baseline`, `section/row/basalt` and the CPU costs of Basalt figures.
    pub fn flatten(&self) -> Vec<(String, String, bool, Option<f64>)> {
        let mut out = Vec::new();
        for s in &self.sections {
            for r in &s.rows {
                let key = format!("{}/{}", s.id, r.key);
                if let Some(f) = &r.baseline {
                    out.push((
                        format!("{key}/baseline"),
                        r.unit.clone(),
                        r.higher_is_better,
                        f.value,
                    ));
                }
                if let Some(f) = &r.basalt {
                    out.push((
                        format!("{key}/basalt"),
                        r.unit.clone(),
                        r.higher_is_better,
                        f.value,
                    ));
                    if let Some(cpu) = &f.cpu {
                        out.push((
                            format!("{key}/basalt_cpu_s_per_gib"),
                            "CPU s/GiB".into(),
                            false,
                            cpu.per_gib,
                        ));
                        out.push((
                            format!("{key}/basalt_cpu_s_per_1000_ios"),
                            "CPU s/1000 IOs".into(),
                            false,
                            cpu.per_1000_ios,
                        ));
                    }
                }
            }
        }
        out
    }

    /// Steps that failed, as `(section title, row label, which side, error)`.
    pub fn failures(&self) -> Vec<(String, String, &'static str, String)> {
        let mut out = Vec::new();
        for s in &self.sections {
            for r in &s.rows {
                for (side, f) in [("baseline", &r.baseline), ("basalt", &r.basalt)] {
                    if let Some(Figure { error: Some(e), .. }) = f {
                        out.push((s.title.clone(), r.label.clone(), side, e.clone()));
                    }
                }
            }
        }
        out
    }
}
