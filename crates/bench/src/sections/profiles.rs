//! fio profiles run on the local disk and on a Basalt volume, one after the other per
//! profile (so drift in the noisy machine affects both alike). Three sets: the basic
//! CoronaFS-style table, the Torus profiles and the Vitastor profiles.

use super::{Ctx, Section, Settings, Side};
use crate::fio::Job;
use crate::results::{Figure, FioSummary, Row, SectionLayout, SectionReport, SectionStatus};

/// Which number of a fio run a row shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Read + write IOPS.
    Iops,
    /// Read IOPS of a mixed run.
    ReadIops,
    /// Write IOPS of a mixed run.
    WriteIops,
    /// Read + write MiB/s.
    MibS,
    /// Mean read latency, microseconds.
    ReadLatUs,
    /// Mean write latency, microseconds.
    WriteLatUs,
}

impl Metric {
    /// Unit shown in the table.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Iops | Metric::ReadIops | Metric::WriteIops => "IOPS",
            Metric::MibS => "MiB/s",
            Metric::ReadLatUs | Metric::WriteLatUs => "us",
        }
    }

    /// Key suffix.
    fn suffix(self) -> &'static str {
        match self {
            Metric::Iops => "iops",
            Metric::ReadIops => "read_iops",
            Metric::WriteIops => "write_iops",
            Metric::MibS => "mib_s",
            Metric::ReadLatUs => "read_lat_us",
            Metric::WriteLatUs => "write_lat_us",
        }
    }

    /// Label suffix for runs that show several numbers.
    fn label_suffix(self) -> &'static str {
        match self {
            Metric::ReadIops => " (read)",
            Metric::WriteIops => " (write)",
            Metric::ReadLatUs | Metric::WriteLatUs => " latency",
            Metric::Iops | Metric::MibS => "",
        }
    }

    /// Whether more is better.
    pub fn higher_is_better(self) -> bool {
        !matches!(self, Metric::ReadLatUs | Metric::WriteLatUs)
    }

    /// The number in a fio summary.
    pub fn value(self, s: &FioSummary) -> f64 {
        match self {
            Metric::Iops => s.read_iops + s.write_iops,
            Metric::ReadIops => s.read_iops,
            Metric::WriteIops => s.write_iops,
            Metric::MibS => s.read_mib_s + s.write_mib_s,
            Metric::ReadLatUs => s.read_lat_mean_us,
            Metric::WriteLatUs => s.write_lat_mean_us,
        }
    }
}

/// One fio workload and the numbers it reports.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Stable key (`randread_4k_qd32`), also the raw file name.
    pub key: String,
    /// What people read.
    pub label: String,
    /// The workload.
    pub job: Job,
    /// The rows it fills.
    pub metrics: Vec<Metric>,
}

fn profile(key: &str, label: &str, job: Job, metrics: &[Metric]) -> Profile {
    Profile {
        key: key.into(),
        label: label.into(),
        job,
        metrics: metrics.to_vec(),
    }
}

fn job(rw: &'static str, bs: &'static str, iodepth: u32, numjobs: u32) -> Job {
    Job {
        rw,
        bs,
        iodepth,
        numjobs,
        rwmixread: None,
    }
}

/// A set of profiles compared disk vs Basalt.
pub struct ProfilesSection {
    id: &'static str,
    title: &'static str,
    intro: String,
    profiles: Vec<Profile>,
}

impl ProfilesSection {
    /// The basic table of the CoronaFS report: sequential 1M, 4k random read QD1/QD32,
    /// depth-32 1M.
    pub fn basic() -> ProfilesSection {
        use Metric::*;
        ProfilesSection {
            id: "disk",
            title: "Local disk vs Basalt volume",
            intro: "The same fio profiles on a file on the local disk under the data directory \
                    (`ioengine=libaio`) and on the Basalt volume through NBD (`ioengine=nbd`), \
                    one job each, run back to back per profile."
                .into(),
            profiles: vec![
                profile(
                    "seqwrite_1m",
                    "Sequential write (1M, QD1)",
                    job("write", "1M", 1, 1),
                    &[MibS],
                ),
                profile(
                    "seqread_1m",
                    "Sequential read (1M, QD1)",
                    job("read", "1M", 1, 1),
                    &[MibS],
                ),
                profile(
                    "randread_4k_qd1",
                    "4k random read (QD1)",
                    job("randread", "4k", 1, 1),
                    &[Iops],
                ),
                profile(
                    "randread_4k_qd32",
                    "4k queued random read (QD32)",
                    job("randread", "4k", 32, 1),
                    &[Iops],
                ),
                profile(
                    "write_1m_qd32",
                    "Depth-32 write (1M)",
                    job("write", "1M", 32, 1),
                    &[MibS],
                ),
                profile(
                    "read_1m_qd32",
                    "Depth-32 read (1M)",
                    job("read", "1M", 32, 1),
                    &[MibS],
                ),
            ],
        }
    }

    /// The Torus report's tests: 1K-block sequential write and read-back (its `dd` runs),
    /// and fio 64k random read/write 75/25 at QD64.
    pub fn torus() -> ProfilesSection {
        use Metric::*;
        let mut mixed = job("randrw", "64k", 64, 1);
        mixed.rwmixread = Some(75);
        ProfilesSection {
            id: "torus",
            title: "Torus profiles",
            intro: "The Torus report's tests: its `dd bs=1K` write and read-back as fio \
                    sequential 1K-block runs at QD1, and its fio 64k random read/write 75/25 \
                    at QD64."
                .into(),
            profiles: vec![
                profile(
                    "seqwrite_1k",
                    "1K-block sequential write",
                    job("write", "1k", 1, 1),
                    &[MibS],
                ),
                profile(
                    "seqread_1k",
                    "1K-block sequential read-back",
                    job("read", "1k", 1, 1),
                    &[MibS],
                ),
                profile(
                    "randrw_64k_qd64",
                    "64k randrw 75/25 QD64",
                    mixed,
                    &[ReadIops, WriteIops, MibS],
                ),
            ],
        }
    }

    /// The Vitastor report's tests, sized to this machine: T1Q1 4k latency, linear 4M with
    /// several jobs, 4k random with several jobs and deep queues.
    pub fn vitastor(s: &Settings) -> ProfilesSection {
        use Metric::*;
        let (j, q) = (s.jobs, s.deep_iodepth);
        ProfilesSection {
            id: "vitastor",
            title: "Vitastor profiles",
            intro: format!(
                "The Vitastor report's tests sized to this machine: 4k T1Q1 latency, linear \
                 4M with {j} jobs at QD4, and 4k random with {j} jobs at QD{q} (T{j}Q{q})."
            ),
            profiles: vec![
                profile(
                    "t1q1_randread_4k",
                    "4k T1Q1 random read",
                    job("randread", "4k", 1, 1),
                    &[ReadLatUs],
                ),
                profile(
                    "t1q1_randwrite_4k",
                    "4k T1Q1 random write",
                    job("randwrite", "4k", 1, 1),
                    &[WriteLatUs],
                ),
                profile(
                    "linear_write_4m",
                    &format!("Linear write 4M T{j}Q4"),
                    job("write", "4M", 4, j),
                    &[MibS],
                ),
                profile(
                    "linear_read_4m",
                    &format!("Linear read 4M T{j}Q4"),
                    job("read", "4M", 4, j),
                    &[MibS],
                ),
                profile(
                    "randread_4k_deep",
                    &format!("4k random read T{j}Q{q}"),
                    job("randread", "4k", q, j),
                    &[Iops],
                ),
                profile(
                    "randwrite_4k_deep",
                    &format!("4k random write T{j}Q{q}"),
                    job("randwrite", "4k", q, j),
                    &[Iops],
                ),
            ],
        }
    }

    /// The profiles of this section.
    pub fn profiles(&self) -> &[Profile] {
        &self.profiles
    }
}

impl Section for ProfilesSection {
    fn id(&self) -> &'static str {
        self.id
    }

    fn plan(&self, ctx: &Ctx) -> Vec<f64> {
        // fio start-up and exit add about half a second per run (measured on 2 cores).
        let per_run = f64::from(ctx.settings.runtime_s + ctx.settings.ramp_s) + 0.5;
        vec![per_run; self.profiles.len() * 2]
    }

    fn run(&self, ctx: &mut Ctx) -> SectionReport {
        let per_run = self.plan(ctx).first().copied().unwrap_or(1.0);
        let mut rows = Vec::new();
        for p in &self.profiles {
            let mut figures: Vec<Vec<Figure>> = Vec::new();
            for side in [Side::Disk, Side::Basalt] {
                ctx.progress
                    .step(&format!("{} on {}", p.label, side.name()), per_run);
                let name = format!("{}-{}", self.id, p.key);
                let figure = ctx.fio_step(&name, &p.job, side);
                figures.push(
                    p.metrics
                        .iter()
                        .map(|m| Figure {
                            value: figure.fio.as_ref().map(|f| m.value(f)),
                            ..figure.clone()
                        })
                        .collect(),
                );
            }
            for (i, m) in p.metrics.iter().enumerate() {
                rows.push(Row {
                    key: format!("{}_{}", p.key, m.suffix()),
                    label: format!("{}{}", p.label, m.label_suffix()),
                    unit: m.unit().into(),
                    higher_is_better: m.higher_is_better(),
                    baseline: Some(figures[0][i].clone()),
                    basalt: Some(figures[1][i].clone()),
                });
            }
        }
        let mut notes = Vec::new();
        if !ctx.disk_direct {
            notes.push(
                "The filesystem under the data directory does not support O_DIRECT: the disk \
                 baseline ran buffered (`direct=0`), so it partly measures the page cache."
                    .to_string(),
            );
        }
        SectionReport {
            id: self.id.into(),
            title: self.title.into(),
            intro: self.intro.clone(),
            baseline_name: "Local disk".into(),
            status: SectionStatus::Measured,
            layout: SectionLayout::Comparison,
            notes,
            rows,
        }
    }
}
