//! The Simplyblock-style sweep over OSD counts, and the redundancy schemes beside it.
//!
//! Each step starts a fresh `basalt up` with N OSDs (the same process the other sections
//! measure, with `--osds N --replicas R`), writes its volume once, runs three workloads and
//! stops it. The sweep uses 1 replica, so N OSDs mean N times the disks; its rows carry linear
//! scaling (N times the 1-OSD figure) as their baseline, which makes the ratio column the
//! scaling efficiency. The redundancy schemes (replication with 2 and 3 replicas, erasure
//! coding 2+1) run the same workloads at one OSD count.

pub mod render;

pub use render::{assessment, curves, render_tables, Curve};

use super::{Ctx, FioRun, Section, Settings};
use crate::cluster::{ClusterConfig, UpProcess};
use crate::fio::{self, FioTarget, Job, Span};
use crate::results::{Figure, Row, SectionLayout, SectionReport, SectionStatus};
use crate::sections::profiles::Metric;
use crate::under_test::UnderTest;
use basalt_proto::size::{format_size, human_bytes};

/// Section id, the prefix of its figure keys.
pub const ID: &str = "scaling";
/// Heading of the section.
pub const TITLE: &str = "Scaling over OSD counts (Simplyblock)";
/// Replicas of the sweep: 1, so N OSDs mean N times the disks.
pub const SWEEP_REPLICAS: u32 = 1;
/// The sweep's redundancy.
pub const SWEEP: Redundancy = Redundancy::Replicas(SWEEP_REPLICAS);

/// How a step's pool keeps its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Redundancy {
    /// `n` replicas.
    Replicas(u32),
    /// Erasure coded, k data + m parity chunks per stripe.
    Ec { k: u32, m: u32 },
}

impl Redundancy {
    /// `1 replica`, `3 replicas`, `EC 2+1`.
    pub fn label(self) -> String {
        match self {
            Redundancy::Replicas(r) => replicas_label(r),
            Redundancy::Ec { k, m } => format!("EC {k}+{m}"),
        }
    }

    /// Its part of a row key: `replicas3`, `ec2p1`.
    pub fn key(self) -> String {
        match self {
            Redundancy::Replicas(r) => format!("replicas{r}"),
            Redundancy::Ec { k, m } => format!("ec{k}p{m}"),
        }
    }

    /// Read back [`Redundancy::key`].
    pub fn parse(key: &str) -> Option<Redundancy> {
        if let Some(r) = key.strip_prefix("replicas") {
            return r.parse().ok().map(Redundancy::Replicas);
        }
        let (k, m) = key.strip_prefix("ec")?.split_once('p')?;
        Some(Redundancy::Ec {
            k: k.parse().ok()?,
            m: m.parse().ok()?,
        })
    }

    /// Bytes written to stores per byte of a whole-stripe or replicated write.
    pub fn write_factor(self) -> f64 {
        match self {
            Redundancy::Replicas(r) => f64::from(r),
            Redundancy::Ec { k, m } => f64::from(k + m) / f64::from(k),
        }
    }

    /// OSDs a pool of this scheme needs (one per replica or chunk).
    pub fn width(self) -> u32 {
        match self {
            Redundancy::Replicas(r) => r,
            Redundancy::Ec { k, m } => k + m,
        }
    }
}
/// Planned seconds to start and stop a `basalt up` (measured: about 0.2 s each way).
const START_STOP_S: f64 = 1.5;
/// Planned write speed of preconditioning, per replica (bytes/s), for the ETA only.
const PLAN_FILL_BYTES_PER_S: f64 = (300u64 << 20) as f64;
/// fio start-up and exit per run (measured on 2 cores), for the ETA only.
const FIO_OVERHEAD_S: f64 = 0.5;

/// One workload of the sweep; its queue shape comes from the run's [`Settings`].
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Key suffix of its rows and raw files (`randread_4k_iops`).
    pub key: &'static str,
    /// Column heading (`4k random read`).
    pub label: &'static str,
    rw: &'static str,
    bs: &'static str,
    rwmixread: Option<u32>,
    metric: Metric,
}

/// The workloads of every step, in run order: reads first, on the freshly written volume.
pub const WORKLOADS: [Workload; 3] = [
    Workload {
        key: "randread_4k_iops",
        label: "4k random read",
        rw: "randread",
        bs: "4k",
        rwmixread: None,
        metric: Metric::Iops,
    },
    Workload {
        key: "randwrite_4k_iops",
        label: "4k random write",
        rw: "randwrite",
        bs: "4k",
        rwmixread: None,
        metric: Metric::Iops,
    },
    Workload {
        key: "seq_128k_rw70_mib_s",
        label: "128k sequential 70/30",
        rw: "rw",
        bs: "128k",
        rwmixread: Some(70),
        metric: Metric::MibS,
    },
];

impl Workload {
    /// The fio job: the run's job count, each at the deep queue depth.
    pub fn job(&self, s: &Settings) -> Job {
        Job {
            rw: self.rw,
            bs: self.bs,
            iodepth: s.deep_iodepth,
            numjobs: s.jobs,
            rwmixread: self.rwmixread,
        }
    }
}

/// Which cluster sizes and pools are measured, and how long each run is.
#[derive(Clone, Debug)]
pub struct ScalingPlan {
    /// OSD counts of the sweep (at [`SWEEP_REPLICAS`]), ascending from 1.
    pub osd_counts: Vec<u32>,
    /// OSD count at which the redundancy schemes are compared.
    pub scheme_osds: u32,
    /// Redundancy schemes measured at `scheme_osds` besides the sweep.
    pub schemes: Vec<Redundancy>,
    /// Seconds per timed fio run.
    pub runtime_s: u32,
    /// Warm-up seconds before each timed run.
    pub ramp_s: u32,
    /// Size of each step's volume.
    pub size_bytes: u64,
}

impl ScalingPlan {
    /// The full run: 1 to 4 OSDs, then 2 and 3 replicas and EC 2+1 at 3 OSDs; 8 s runs
    /// after 2 s of warm-up on a 1 GiB volume (about 5 minutes on 2 cores).
    pub fn full() -> ScalingPlan {
        ScalingPlan {
            osd_counts: vec![1, 2, 3, 4],
            scheme_osds: 3,
            schemes: vec![
                Redundancy::Replicas(2),
                Redundancy::Replicas(3),
                Redundancy::Ec { k: 2, m: 1 },
            ],
            runtime_s: 8,
            ramp_s: 2,
            size_bytes: 1 << 30,
        }
    }

    /// `--quick`: 1 and 2 OSDs, then 2 and 3 replicas and EC 2+1 at 3 OSDs; 2 s runs,
    /// 128 MiB volumes.
    pub fn quick() -> ScalingPlan {
        ScalingPlan {
            osd_counts: vec![1, 2],
            scheme_osds: 3,
            schemes: vec![
                Redundancy::Replicas(2),
                Redundancy::Replicas(3),
                Redundancy::Ec { k: 2, m: 1 },
            ],
            runtime_s: 2,
            ramp_s: 0,
            size_bytes: 128 << 20,
        }
    }

    /// `--smoke`: 1 and 2 OSDs, then EC 2+1 at 3 OSDs (the erasure-coded path is the one
    /// the sweep would otherwise leave untried); 1 s runs, 32 MiB volumes.
    pub fn smoke() -> ScalingPlan {
        ScalingPlan {
            osd_counts: vec![1, 2],
            scheme_osds: 3,
            schemes: vec![Redundancy::Ec { k: 2, m: 1 }],
            runtime_s: 1,
            ramp_s: 0,
            size_bytes: 32 << 20,
        }
    }

    /// Cluster configurations in run order as `(osds, scheme)`: the sweep, then each
    /// scheme (a scheme equal to the sweep's is the sweep's step, not run twice).
    pub fn configs(&self) -> Vec<(u32, Redundancy)> {
        let sweep = self.osd_counts.iter().map(|&n| (n, SWEEP));
        let schemes = self
            .schemes
            .iter()
            .filter(|&&r| r != SWEEP)
            .map(|&r| (self.scheme_osds, r));
        sweep.chain(schemes).collect()
    }

    /// Planned seconds to start a cluster of `scheme`, write its volume once and stop it.
    pub fn start_seconds(&self, scheme: Redundancy) -> f64 {
        START_STOP_S + self.size_bytes as f64 * scheme.write_factor() / PLAN_FILL_BYTES_PER_S
    }

    /// Planned seconds of one timed fio run.
    pub fn run_seconds(&self) -> f64 {
        f64::from(self.runtime_s + self.ramp_s) + FIO_OVERHEAD_S
    }

    /// Planned seconds of every step: per configuration, its start and one run per workload.
    pub fn step_seconds(&self) -> Vec<f64> {
        self.configs()
            .iter()
            .flat_map(|&(_, r)| {
                std::iter::once(self.start_seconds(r))
                    .chain(WORKLOADS.iter().map(|_| self.run_seconds()))
            })
            .collect()
    }
}

/// The scaling sweep and the redundancy schemes.
pub struct ScalingSection {
    plan: ScalingPlan,
    base: ClusterConfig,
    /// Why the sweep cannot run here (it rebuilds the cluster per step).
    skip: Option<String>,
}

/// Why the sweep is not run on an existing cluster (one line in the report).
pub const NOT_ON_EXISTING: &str = "not measured on an existing cluster: the sweep starts a \
    fresh `basalt up` for every OSD count and replica count, and an existing cluster is not \
    rebuilt; run `basalt bench storage --cluster local` for it";

impl ScalingSection {
    /// The steps of `plan`, each cluster configured like `base` (PGs, object size, OSD
    /// capacity) except for its OSD and replica counts and its volume size.
    pub fn new(plan: ScalingPlan, base: &ClusterConfig) -> ScalingSection {
        ScalingSection {
            plan,
            base: base.clone(),
            skip: None,
        }
    }

    /// The section, reported as not measured for `reason` (no step runs).
    pub fn skipped(plan: ScalingPlan, base: &ClusterConfig, reason: &str) -> ScalingSection {
        ScalingSection {
            skip: Some(reason.to_string()),
            ..ScalingSection::new(plan, base)
        }
    }

    fn intro(&self, ctx: &Ctx) -> String {
        let p = &self.plan;
        let warm_up = if p.ramp_s > 0 {
            format!(" after {} s of warm-up", p.ramp_s)
        } else {
            String::new()
        };
        let schemes: Vec<String> = p
            .schemes
            .iter()
            .filter(|&&r| r != SWEEP)
            .map(|r| match r {
                Redundancy::Replicas(n) => format!("{n} replicas"),
                Redundancy::Ec { k, m } => format!("erasure coded {k}+{m}"),
            })
            .collect();
        format!(
            "4k random read and write IOPS and 128k sequential 70/30 read/write throughput, \
             {j} fio jobs at QD{q} each through NBD (Simplyblock used 20 jobs at QD128 on \
             separate hosts), on a fresh `basalt up` per step: its {size} volume is written \
             once, then each workload runs {rt} s{warm_up}. The sweep goes over {osds} OSDs \
             with {SWEEP_REPLICAS} replica, so N OSDs mean N times the disks for the same data: \
             that is the fair measure of scaling (with R replicas every write lands on R of the \
             N disks). Scaling efficiency is the figure at N OSDs divided by N times the figure at \
             1 OSD (100% is linear). All OSDs run in one process on this host and share its \
             {cores} cores and its one disk, so the sweep shows how Basalt's own path spreads \
             load over OSDs, not what added machines would bring. Redundancy schemes: pools \
             with {schemes} run the same workloads at {m} OSDs (an erasure-coded write \
             smaller than a stripe rewrites the whole stripe, and every EC write is flushed \
             on every member).",
            j = ctx.settings.jobs,
            q = ctx.settings.deep_iodepth,
            size = human_bytes(p.size_bytes),
            rt = p.runtime_s,
            osds = and_list(&p.osd_counts),
            cores = crate::environment::cores(),
            schemes = and_words(&schemes),
            m = p.scheme_osds,
        )
    }

    /// Start the cluster of one configuration, measure every workload on it, stop it and
    /// remove its data. A cluster that does not start fails each of its figures.
    fn measure(
        &self,
        ctx: &mut Ctx,
        osds: u32,
        scheme: Redundancy,
        notes: &mut Vec<String>,
    ) -> Step {
        let name = format!("{ID}-osds{osds}-{}", scheme.key());
        let what = config_label(osds, scheme);
        ctx.progress.step(
            &format!("scaling: start basalt up ({what}), write its volume once"),
            self.plan.start_seconds(scheme),
        );
        let data_dir = ctx.work_dir.join(&name);
        let log = ctx.raw_dir.join(format!("basalt-up-{name}.log"));
        let (replicas, ec) = match scheme {
            Redundancy::Replicas(r) => (r, None),
            Redundancy::Ec { k, m } => (1, Some(format!("{k}+{m}"))),
        };
        let config = ClusterConfig {
            osds,
            replicas,
            ec,
            volume_size: format_size(self.plan.size_bytes),
            nvmf: false,
            ..self.base.clone()
        };
        let figures = match UpProcess::start(&data_dir, &log, &config) {
            Ok(cluster) => self.measure_on(ctx, &cluster, &name, &what, notes),
            Err(e) => {
                let msg = format!("basalt up ({what}) did not start: {e:#}");
                ctx.progress.note(&format!("failed: {msg}"));
                let mut figures = Vec::new();
                for w in &WORKLOADS {
                    let label = format!("scaling: {} ({what})", w.label);
                    ctx.progress.step(&label, self.plan.run_seconds());
                    figures.push(Figure::failed(msg.clone(), None, None));
                }
                figures
            }
        };
        // The cluster has stopped (dropped above); its stores go so the next step has the
        // disk space.
        let _ = std::fs::remove_dir_all(&data_dir);
        Step {
            osds,
            scheme,
            figures,
        }
    }

    fn measure_on(
        &self,
        ctx: &mut Ctx,
        cluster: &UpProcess,
        name: &str,
        what: &str,
        notes: &mut Vec<String>,
    ) -> Vec<Figure> {
        let target = FioTarget::Nbd {
            uri: cluster.uri.clone(),
        };
        let sources = cluster.cpu_sources();
        let size_bytes = self.plan.size_bytes;
        // Reads must find written data, as on the other sections' volume.
        let fill = FioRun {
            file: format!("{name}-precondition"),
            job: &fio::FILL,
            target: target.clone(),
            size_bytes,
            span: Span::Once,
            timeout: fio::fill_bound(size_bytes),
        };
        if let Some(e) = ctx.fio(&fill, &sources).error {
            notes.push(format!(
                "Writing the volume of the {what} step once failed ({e}); its reads may have \
                 found unwritten blocks."
            ));
        }
        let span = Span::Timed {
            runtime_s: self.plan.runtime_s,
            ramp_s: self.plan.ramp_s,
        };
        let mut figures = Vec::new();
        for w in &WORKLOADS {
            let label = format!("scaling: {} ({what})", w.label);
            ctx.progress.step(&label, self.plan.run_seconds());
            let job = w.job(&ctx.settings);
            let run = FioRun {
                file: format!("{name}-{}", w.key),
                job: &job,
                target: target.clone(),
                size_bytes,
                span,
                timeout: fio::timed_bound(self.plan.runtime_s, self.plan.ramp_s),
            };
            let figure = ctx.fio(&run, &sources);
            figures.push(Figure {
                value: figure.fio.as_ref().map(|s| w.metric.value(s)),
                ..figure
            });
        }
        figures
    }
}

impl Section for ScalingSection {
    fn id(&self) -> &'static str {
        ID
    }

    fn plan(&self, _ctx: &Ctx) -> Vec<f64> {
        if self.skip.is_some() {
            return Vec::new();
        }
        self.plan.step_seconds()
    }

    fn run(&self, ctx: &mut Ctx) -> SectionReport {
        if let Some(reason) = &self.skip {
            ctx.progress.note(&format!("scaling sweep: {reason}"));
            return SectionReport {
                id: ID.into(),
                title: TITLE.into(),
                intro: "4k random read and write IOPS and 128k sequential 70/30 throughput \
                        over growing OSD counts (Simplyblock), each on a fresh `basalt up`."
                    .into(),
                baseline_name: "Linear scaling".into(),
                status: SectionStatus::NotMeasured {
                    reason: reason.clone(),
                },
                layout: SectionLayout::Scaling,
                notes: Vec::new(),
                rows: Vec::new(),
            };
        }
        let mut notes = Vec::new();
        let steps: Vec<Step> = self
            .plan
            .configs()
            .into_iter()
            .map(|(osds, scheme)| self.measure(ctx, osds, scheme, &mut notes))
            .collect();
        SectionReport {
            id: ID.into(),
            title: TITLE.into(),
            intro: self.intro(ctx),
            baseline_name: "Linear scaling".into(),
            status: SectionStatus::Measured,
            layout: SectionLayout::Scaling,
            notes,
            rows: rows(&steps),
        }
    }
}

/// What one cluster configuration measured: one figure per workload, in [`WORKLOADS`]
/// order.
#[derive(Clone, Debug)]
pub struct Step {
    /// OSDs in the cluster.
    pub osds: u32,
    /// How its pool keeps data.
    pub scheme: Redundancy,
    /// The figures, valued in each workload's unit.
    pub figures: Vec<Figure>,
}

/// `1`, `1 and 2`, `1, 2 and 3`.
pub fn and_list(values: &[u32]) -> String {
    match values {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(u32::to_string).collect();
            format!("{} and {last}", init.join(", "))
        }
    }
}

/// `a`, `a and b`, `a, b and c`.
pub fn and_words(values: &[String]) -> String {
    match values {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// `2 OSDs, 1 replica`, `3 OSDs, EC 2+1`.
pub fn config_label(osds: u32, scheme: Redundancy) -> String {
    let s = if osds == 1 { "" } else { "s" };
    format!("{osds} OSD{s}, {}", scheme.label())
}

/// `1 replica`, `3 replicas`.
pub fn replicas_label(replicas: u32) -> String {
    let s = if replicas == 1 { "" } else { "s" };
    format!("{replicas} replica{s}")
}

/// The figure linear scaling predicts at `osds` OSDs from the figure at 1 OSD; `None` when
/// the 1-OSD figure is not positive (nothing to scale).
pub fn linear(at_one: f64, osds: u32) -> Option<f64> {
    (at_one > 0.0 && at_one.is_finite()).then(|| at_one * f64::from(osds))
}

/// Scaling efficiency at `osds` OSDs: the figure there divided by `osds` times the figure at
/// 1 OSD (1.0 is linear).
pub fn efficiency(at_one: f64, osds: u32, at_n: f64) -> Option<f64> {
    linear(at_one, osds).map(|ideal| at_n / ideal)
}

/// Key of the row for `workload` at `osds` OSDs with `scheme`
/// (`osds2_replicas1_randread_4k_iops`, `osds3_ec2p1_randwrite_4k_iops`); [`parse_key`]
/// reads it back.
pub fn row_key(osds: u32, scheme: Redundancy, workload: &str) -> String {
    format!("osds{osds}_{}_{workload}", scheme.key())
}

/// `(osds, scheme, workload)` of a key made by [`row_key`].
pub fn parse_key(key: &str) -> Option<(u32, Redundancy, &str)> {
    let (osds, rest) = key.strip_prefix("osds")?.split_once('_')?;
    let (scheme, workload) = rest.split_once('_')?;
    Some((osds.parse().ok()?, Redundancy::parse(scheme)?, workload))
}

/// The section's rows, one per step and workload. Sweep rows carry linear scaling (N times
/// the 1-OSD figure) as their baseline, so their ratio is the scaling efficiency; scheme rows
/// have no baseline.
pub fn rows(steps: &[Step]) -> Vec<Row> {
    let one = steps.iter().find(|s| s.osds == 1 && s.scheme == SWEEP);
    let mut rows = Vec::new();
    for step in steps {
        for (i, (w, figure)) in WORKLOADS.iter().zip(&step.figures).enumerate() {
            let at_one = one.and_then(|s| s.figures.get(i)?.value);
            let baseline = at_one
                .filter(|_| step.scheme == SWEEP)
                .and_then(|v| linear(v, step.osds))
                .map(|ideal| Figure {
                    value: Some(ideal),
                    ..Figure::default()
                });
            rows.push(Row {
                key: row_key(step.osds, step.scheme, w.key),
                label: format!("{}, {}", w.label, config_label(step.osds, step.scheme)),
                unit: w.metric.unit().into(),
                higher_is_better: true,
                baseline,
                basalt: Some(figure.clone()),
            });
        }
    }
    rows
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn measured(v: f64) -> Figure {
        Figure {
            value: Some(v),
            command: Some("fio --name=bench --ioengine=nbd".into()),
            raw: Some(format!("raw/scaling-{v}.json")),
            ..Figure::default()
        }
    }

    fn step(osds: u32, scheme: Redundancy, figures: [Figure; 3]) -> Step {
        Step {
            osds,
            scheme,
            figures: figures.to_vec(),
        }
    }

    const R1: Redundancy = Redundancy::Replicas(1);

    /// A sweep over 1-3 OSDs (the 3-OSD random write failed) and 2 and 3 replicas at
    /// 3 OSDs, as the section returns it.
    pub(crate) fn sample_section() -> SectionReport {
        let steps = [
            step(
                1,
                R1,
                [measured(10000.0), measured(4000.0), measured(300.0)],
            ),
            step(
                2,
                R1,
                [measured(18000.0), measured(6000.0), measured(600.0)],
            ),
            step(
                3,
                R1,
                [
                    measured(24000.0),
                    Figure::failed("fio exited with 1", None, None),
                    measured(450.0),
                ],
            ),
            step(
                3,
                Redundancy::Replicas(2),
                [measured(23000.0), measured(3000.0), measured(400.0)],
            ),
            step(
                3,
                Redundancy::Replicas(3),
                [measured(22000.0), measured(2000.0), measured(300.0)],
            ),
            step(
                3,
                Redundancy::Ec { k: 2, m: 1 },
                [measured(15000.0), measured(500.0), measured(350.0)],
            ),
        ];
        SectionReport {
            id: ID.into(),
            title: TITLE.into(),
            intro: "Sweep.".into(),
            baseline_name: "Linear scaling".into(),
            status: SectionStatus::Measured,
            layout: SectionLayout::Scaling,
            notes: vec![],
            rows: rows(&steps),
        }
    }

    #[test]
    fn efficiency_is_the_figure_over_n_times_the_one_osd_figure() {
        // Goal: efficiency = figure at N / (N x figure at 1); no efficiency without a
        // positive 1-OSD figure.
        assert_eq!(linear(10000.0, 3), Some(30000.0));
        assert_eq!(efficiency(10000.0, 1, 10000.0), Some(1.0));
        assert_eq!(efficiency(10000.0, 2, 18000.0), Some(0.9));
        assert_eq!(efficiency(300.0, 3, 450.0), Some(0.5));
        assert_eq!(
            efficiency(100.0, 4, 500.0),
            Some(1.25),
            "above linear is kept"
        );
        assert_eq!(efficiency(0.0, 2, 500.0), None);
        assert_eq!(efficiency(f64::NAN, 2, 500.0), None);
    }

    #[test]
    fn sweep_rows_carry_linear_scaling_as_baseline() {
        // Goal: a sweep row's ratio to its baseline is its scaling efficiency; scheme rows
        // and rows without a 1-OSD figure have no baseline; failures stay failures.
        let sec = sample_section();
        assert_eq!(sec.rows.len(), 18);
        let row = |key: &str| sec.rows.iter().find(|r| r.key == key).unwrap();
        let two = row("osds2_replicas1_randread_4k_iops");
        assert_eq!(two.label, "4k random read, 2 OSDs, 1 replica");
        assert_eq!(two.unit, "IOPS");
        assert_eq!(two.baseline.as_ref().unwrap().value, Some(20000.0));
        assert!((two.percent_of_baseline().unwrap() - 90.0).abs() < 1e-9);
        assert!(
            (row("osds1_replicas1_seq_128k_rw70_mib_s")
                .percent_of_baseline()
                .unwrap()
                - 100.0)
                .abs()
                < 1e-9
        );
        let failed = row("osds3_replicas1_randwrite_4k_iops");
        assert_eq!(failed.baseline.as_ref().unwrap().value, Some(12000.0));
        assert!(failed.percent_of_baseline().is_none());
        assert!(failed.basalt.as_ref().unwrap().error.is_some());
        let scheme = row("osds3_replicas2_randwrite_4k_iops");
        assert!(scheme.baseline.is_none());
        assert_eq!(scheme.basalt.as_ref().unwrap().value, Some(3000.0));
        // Without a 1-OSD step there is nothing to scale from.
        let no_one = rows(&[step(2, R1, [measured(1.0), measured(1.0), measured(1.0)])]);
        assert!(no_one.iter().all(|r| r.baseline.is_none()));
    }

    #[test]
    fn lists_read_as_prose() {
        // Goal: the intro names the OSD and replica counts as a person would.
        assert_eq!(and_list(&[]), "");
        assert_eq!(and_list(&[3]), "3");
        assert_eq!(and_list(&[2, 3]), "2 and 3");
        assert_eq!(and_list(&[1, 2, 3, 4]), "1, 2, 3 and 4");
        assert_eq!(
            config_label(1, Redundancy::Replicas(3)),
            "1 OSD, 3 replicas"
        );
        assert_eq!(config_label(4, R1), "4 OSDs, 1 replica");
        assert_eq!(
            config_label(3, Redundancy::Ec { k: 4, m: 2 }),
            "3 OSDs, EC 4+2"
        );
        assert_eq!(and_words(&["a".into(), "b".into()]), "a and b");
    }

    #[test]
    fn keys_round_trip() {
        // Goal: the configuration of a row is read back from its key.
        let r3 = Redundancy::Replicas(3);
        let key = row_key(12, r3, "seq_128k_rw70_mib_s");
        assert_eq!(key, "osds12_replicas3_seq_128k_rw70_mib_s");
        assert_eq!(parse_key(&key), Some((12, r3, "seq_128k_rw70_mib_s")));
        let ec = Redundancy::Ec { k: 8, m: 3 };
        let key = row_key(3, ec, "randwrite_4k_iops");
        assert_eq!(key, "osds3_ec8p3_randwrite_4k_iops");
        assert_eq!(parse_key(&key), Some((3, ec, "randwrite_4k_iops")));
        assert_eq!(parse_key("osds3_ecxp1_a"), None);
        assert_eq!(parse_key("randread_4k_qd32_iops"), None);
        assert_eq!(parse_key("osdsx_replicas1_a"), None);
    }

    #[test]
    fn plans_fit_their_time_budgets() {
        // Goal: the sweep adds at most ~4 minutes to a full run and well under a minute to a
        // quick one (the whole --quick run must stay under 3 minutes), and every plan starts
        // at 1 OSD so efficiency has its reference.
        let full = ScalingPlan::full();
        let quick = ScalingPlan::quick();
        let smoke = ScalingPlan::smoke();
        let total = |p: &ScalingPlan| p.step_seconds().iter().sum::<f64>();
        assert!(total(&full) <= 300.0, "full: {} s", total(&full));
        assert!(total(&quick) <= 55.0, "quick: {} s", total(&quick));
        assert!(total(&smoke) < total(&quick));
        for p in [&full, &quick, &smoke] {
            assert_eq!(p.osd_counts[0], 1);
            assert!(p.osd_counts.windows(2).all(|w| w[0] < w[1]));
            assert!(p.schemes.iter().all(|&r| r.width() <= p.scheme_osds));
            assert_eq!(
                p.step_seconds().len(),
                p.configs().len() * (1 + WORKLOADS.len())
            );
        }
        let (r2, r3, ec) = (
            Redundancy::Replicas(2),
            Redundancy::Replicas(3),
            Redundancy::Ec { k: 2, m: 1 },
        );
        assert_eq!(
            full.configs(),
            vec![
                (1, R1),
                (2, R1),
                (3, R1),
                (4, R1),
                (3, r2),
                (3, r3),
                (3, ec)
            ]
        );
        assert_eq!(
            quick.configs(),
            vec![(1, R1), (2, R1), (3, r2), (3, r3), (3, ec)]
        );
        assert_eq!(smoke.configs(), vec![(1, R1), (2, R1), (3, ec)]);
    }
}
