//! Variants of `basalt up` compared side by side (the security and metrics sections): the
//! clusters run together in one data directory, each volume is written once, then every
//! workload runs on every variant back to back, in an order that rotates from round to
//! round and workload to workload (so a drift of the machine's load falls on all variants
//! alike); a variant's figure is the median of its rounds.

use super::{Ctx, FioRun};
use crate::cluster::{ClusterConfig, UpProcess};
use crate::fio::{self, FioTarget, Job, Span};
use crate::results::Figure;
use crate::under_test::UnderTest;

/// One measured workload: fio's nbd engine, 4k blocks.
pub struct Workload {
    /// Stem of figure keys and raw file names (`randread_4k_qd32`).
    pub key: &'static str,
    pub label: &'static str,
    pub rw: &'static str,
    pub iodepth: u32,
}

pub const RANDREAD_4K_QD1: Workload = Workload {
    key: "randread_4k_qd1",
    label: "4k random read QD1",
    rw: "randread",
    iodepth: 1,
};
pub const RANDREAD_4K_QD32: Workload = Workload {
    key: "randread_4k_qd32",
    label: "4k random read QD32",
    rw: "randread",
    iodepth: 32,
};
pub const RANDWRITE_4K_QD1: Workload = Workload {
    key: "randwrite_4k_qd1",
    label: "4k random write QD1",
    rw: "randwrite",
    iodepth: 1,
};
pub const RANDWRITE_4K_QD32: Workload = Workload {
    key: "randwrite_4k_qd32",
    label: "4k random write QD32",
    rw: "randwrite",
    iodepth: 32,
};

/// One measured variant: a cluster and the NBD URI fio uses on it (several variants may
/// share a cluster, e.g. plaintext and TLS NBD).
pub struct Variant<'a> {
    pub name: &'static str,
    pub cluster: &'a UpProcess,
    pub uri: String,
}

/// How long and how often each workload runs.
#[derive(Clone, Copy, Debug)]
pub struct Rounds {
    pub rounds: usize,
    pub runtime_s: u32,
    pub ramp_s: u32,
    /// Bytes of the volume written once and covered by the runs.
    pub size_bytes: u64,
}

/// Start one `basalt up` per `(name, extra args)` under `ctx.work_dir/{id}/{name}` with
/// `config`, and write `size_bytes` of each volume once (reads then find data).
pub fn start_clusters(
    ctx: &mut Ctx,
    id: &str,
    config: &ClusterConfig,
    variants: &[(&str, Vec<&str>)],
    size_bytes: u64,
) -> anyhow::Result<Vec<UpProcess>> {
    let dir = ctx.work_dir.join(id);
    let exe = std::env::current_exe()?;
    let mut clusters = Vec::new();
    for (name, args) in variants {
        let log = ctx.raw_dir.join(format!("basalt-up-{id}-{name}.log"));
        let c = UpProcess::start_exe_with(&exe, &dir.join(name), &log, config, args)
            .map_err(|e| anyhow::anyhow!("basalt up ({name}) did not start: {e:#}"))?;
        clusters.push(c);
    }
    for (c, (name, _)) in clusters.iter().zip(variants) {
        let fill = FioRun {
            file: format!("{id}-{name}-precondition"),
            job: &fio::FILL,
            target: FioTarget::Nbd { uri: c.uri.clone() },
            size_bytes,
            span: Span::Once,
            timeout: fio::fill_bound(size_bytes),
        };
        if let Some(e) = ctx.fio(&fill, &c.cpu_sources()).error {
            anyhow::bail!("writing the {name} cluster's volume failed: {e}");
        }
    }
    Ok(clusters)
}

/// Planned seconds of [`measure`]'s steps (one per run), for the progress ETA.
pub fn plan(rounds: &Rounds, workloads: usize, variants: usize) -> Vec<f64> {
    let run_s = (rounds.runtime_s + rounds.ramp_s) as f64 + 1.0;
    vec![run_s; rounds.rounds * workloads * variants]
}

/// Figures (IOPS, with fio's summary and the CPU of the variant's cluster) by workload,
/// then by variant, each the median of `rounds.rounds` runs; raw outputs under
/// `raw/{id}-{workload}-{variant}-r{round}`.
pub fn measure(
    ctx: &mut Ctx,
    id: &str,
    rounds: &Rounds,
    workloads: &[Workload],
    variants: &[Variant],
    notes: &mut Vec<String>,
) -> Vec<Vec<Figure>> {
    let Rounds {
        runtime_s, ramp_s, ..
    } = *rounds;
    let mut all: Vec<Vec<Vec<Figure>>> = vec![vec![Vec::new(); variants.len()]; workloads.len()];
    for round in 0..rounds.rounds {
        for (wi, w) in workloads.iter().enumerate() {
            let job = Job {
                rw: w.rw,
                bs: "4k",
                iodepth: w.iodepth,
                numjobs: 1,
                rwmixread: None,
            };
            for k in 0..variants.len() {
                let vi = (k + round + wi) % variants.len();
                let v = &variants[vi];
                ctx.progress.step(
                    &format!("{id}: {} ({}, round {})", w.label, v.name, round + 1),
                    (runtime_s + ramp_s) as f64,
                );
                let run = FioRun {
                    file: format!("{id}-{}-{}-r{}", w.key, v.name, round + 1),
                    job: &job,
                    target: FioTarget::Nbd { uri: v.uri.clone() },
                    size_bytes: rounds.size_bytes,
                    span: Span::Timed { runtime_s, ramp_s },
                    timeout: fio::timed_bound(runtime_s, ramp_s),
                };
                let f = ctx.fio(&run, &v.cluster.cpu_sources());
                let value = f.fio.as_ref().map(|s| s.read_iops + s.write_iops);
                all[wi][vi].push(Figure { value, ..f });
            }
        }
    }
    if rounds.rounds > 1 {
        notes.push(format!(
            "Each figure is the median of {} rounds; the raw outputs of every round are \
             under raw/{id}-*.",
            rounds.rounds
        ));
    }
    all.into_iter()
        .map(|by_variant| by_variant.into_iter().map(median).collect())
        .collect()
}

/// Failed figures by workload and variant, for when the clusters did not start.
pub fn failed(
    ctx: &mut Ctx,
    id: &str,
    msg: String,
    rounds: &Rounds,
    workloads: usize,
    variants: usize,
) -> Vec<Vec<Figure>> {
    ctx.progress.note(&format!("failed: {msg}"));
    for _ in 0..rounds.rounds * workloads * variants {
        ctx.progress.step(&format!("{id}: not measured"), 0.0);
    }
    vec![vec![Figure::failed(msg, None, None); variants]; workloads]
}

/// The run with the median IOPS (a failed run if none succeeded).
fn median(mut figures: Vec<Figure>) -> Figure {
    let ok = figures.iter().filter(|f| f.value.is_some()).count();
    if ok == 0 {
        return figures
            .pop()
            .unwrap_or_else(|| Figure::failed("not run", None, None));
    }
    figures.retain(|f| f.value.is_some());
    figures.sort_by(|a, b| {
        a.value
            .partial_cmp(&b.value)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    figures.swap_remove((figures.len() - 1) / 2)
}
