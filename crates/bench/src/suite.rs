//! `basalt bench storage`: plan the run, start the cluster (or serve a volume of an existing
//! one), run every section, release what the run made, write the report, the JSON and the
//! plots.

use crate::cluster::{ClusterConfig, UpProcess};
use crate::existing::ClusterAccess;
use crate::progress::Progress;
use crate::results::{Environment, ExistingClusterInfo, PoolSettings, Results, FORMAT_VERSION};
use crate::sections::network::NetworkSection;
use crate::sections::profiles::ProfilesSection;
use crate::sections::scaling::{self, ScalingPlan, ScalingSection};
use crate::sections::strmvol::StrmvolSection;
use crate::sections::{Ctx, Scale, Section, Settings, Side};
use crate::under_test::{ExistingCluster, UnderTest};
use crate::{environment, fio, interrupt, report, svg};
use anyhow::{bail, Context};
use basalt_proto::size::format_size;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Smallest OSD store capacity passed to `basalt up` (sparse file).
const MIN_OSD_SIZE_BYTES: u64 = 8 << 30;
/// Seconds the daemons' CPU is sampled at rest, before the first step.
const IDLE_SAMPLE_S: u64 = 2;
/// Planned seconds to start the cluster (or serve the volume) and sample it at rest.
const START_S: f64 = 3.0 + IDLE_SAMPLE_S as f64;
/// Every section id, in run order (what `--sections` accepts).
pub const SECTION_IDS: [&str; 12] = [
    "network",
    "disk",
    "torus",
    "vitastor",
    scaling::ID,
    "s3",
    crate::sections::strmvol::ID,
    crate::sections::plasmavmc::ID,
    crate::sections::nvmf::ID,
    crate::sections::memory::ID,
    crate::sections::security::ID,
    crate::sections::metrics_cost::ID,
];
/// Sections that run only when `--sections` names them (they start clusters of their own
/// and take minutes).
const OPT_IN_SECTIONS: [&str; 2] = [
    crate::sections::security::ID,
    crate::sections::metrics_cost::ID,
];
/// Sections that `--quick` leaves out unless `--sections` names them: the memory section
/// writes a million objects and removes their sparse store, minutes on a virtual disk.
const NOT_QUICK_SECTIONS: [&str; 1] = [crate::sections::memory::ID];
/// Sections that run fio on the disk test file and the Basalt volume (which are written
/// once before they run).
const PROFILE_SECTIONS: [&str; 3] = ["disk", "torus", "vitastor"];

/// How `basalt bench storage` was asked to run.
#[derive(Clone, Debug)]
pub struct StorageOptions {
    /// The directory being measured: the disk test file and the Basalt data go into a
    /// temporary directory under it.
    pub data_dir: PathBuf,
    /// Where `report.md`, `results.json`, the plots and `raw/` are written.
    pub out: PathBuf,
    /// Short runs and small sizes (finishes in under 3 minutes on 2 cores).
    pub quick: bool,
    /// Even shorter runs, for the smoke test; the figures mean little.
    pub smoke: bool,
    /// Ids of the sections to run ([`SECTION_IDS`]); `None` runs them all.
    pub sections: Option<Vec<String>>,
    /// The command line, recorded in the report.
    pub command_line: String,
    /// The test guest for the PlasmaVMC section's VM rows (`scripts/build-guest-image.sh`);
    /// None: `target/guest` beside the executable, when it exists.
    pub guest_dir: Option<PathBuf>,
    /// Extra `basalt up` arguments of a local cluster (its store I/O mode).
    pub up_args: Vec<String>,
}

impl StorageOptions {
    /// Run settings for these options on a machine with `cores` cores.
    pub fn settings(&self, cores: usize) -> Settings {
        let (runtime_s, ramp_s, size_bytes) = if self.smoke {
            (1, 0, 64 << 20)
        } else if self.quick {
            (3, 0, 256 << 20)
        } else {
            (20, 2, 2 << 30)
        };
        Settings {
            runtime_s,
            ramp_s,
            size_bytes,
            jobs: (cores as u32).clamp(2, 8),
            deep_iodepth: 32,
        }
    }

    /// The run's size, as sections take it.
    pub fn scale(&self) -> Scale {
        if self.smoke {
            Scale::Smoke
        } else if self.quick {
            Scale::Quick
        } else {
            Scale::Full
        }
    }

    /// Whether section `id` runs.
    pub fn runs(&self, id: &str) -> bool {
        match &self.sections {
            None => {
                let left_out_of_quick =
                    self.quick && !self.smoke && NOT_QUICK_SECTIONS.contains(&id);
                !(OPT_IN_SECTIONS.contains(&id) || left_out_of_quick)
            }
            Some(ids) => ids.iter().any(|s| s == id),
        }
    }

    /// Refuse section ids that do not exist, naming the ones that do.
    pub fn check_sections(&self) -> anyhow::Result<()> {
        for id in self.sections.iter().flatten() {
            if !SECTION_IDS.contains(&id.as_str()) {
                bail!(
                    "unknown section \"{id}\"; the sections are {}",
                    SECTION_IDS.join(", ")
                );
            }
        }
        if self.sections.as_ref().is_some_and(|ids| ids.is_empty()) {
            bail!("--sections names no section");
        }
        Ok(())
    }

    /// Cluster sizes and pools of the scaling sweep for these options.
    pub fn scaling_plan(&self) -> ScalingPlan {
        if self.smoke {
            ScalingPlan::smoke()
        } else if self.quick {
            ScalingPlan::quick()
        } else {
            ScalingPlan::full()
        }
    }
}

/// Removes a scratch directory however the run ends.
pub(crate) struct RemoveOnDrop(pub(crate) PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run the suite on a `basalt up` it starts itself and return the path of `report.md`.
pub fn run_storage(opts: &StorageOptions) -> anyhow::Result<PathBuf> {
    run(opts, None)
}

/// Run the suite on a volume in `pool` of the existing cluster `access` names (its metadata,
/// keyring and TLS), and return the path of `report.md`. The volume is removed however the
/// run ends (a failed step, an error, Ctrl-C).
pub fn run_storage_on(
    opts: &StorageOptions,
    access: &ClusterAccess,
    pool: &str,
) -> anyhow::Result<PathBuf> {
    opts.check_sections()?;
    let existing = crate::existing::Existing::connect(access, pool)?;
    run(opts, Some(&existing))
}

/// The run: prepare, plan, start (or serve), precondition, run every section, release,
/// then write the outputs.
fn run(opts: &StorageOptions, existing: Option<&dyn ExistingCluster>) -> anyhow::Result<PathBuf> {
    let started = Instant::now();
    let generated_utc = environment::utc_now();
    opts.check_sections()?;
    if environment::which("fio").is_none() {
        bail!("fio is not installed; install it with: apt-get install -y fio iperf3");
    }
    interrupt::install();
    let dirs = Dirs::make(opts)?;
    let settings = opts.settings(environment::cores());
    let config = cluster_config(opts, &settings);
    let disk_direct = environment::supports_direct_io(&dirs.work);
    let info = existing.map(|e| e.info());
    let sections = sections(opts, &settings, &config, existing, info.as_ref());
    let mut ctx = Ctx {
        settings: settings.clone(),
        out_dir: opts.out.clone(),
        raw_dir: dirs.raw.clone(),
        work_dir: dirs.work.clone(),
        disk_file: dirs.work.join("disk-baseline.dat"),
        disk_direct,
        cluster: Err("not started".into()),
        progress: Progress::new(0, 0.0, false),
        network_mib_s: None,
    };
    let profiles = PROFILE_SECTIONS.iter().any(|id| opts.runs(id));
    let prep = plan_progress(&mut ctx, &sections, profiles, opts);
    let mut notes = first_notes(opts, info.as_ref(), disk_direct);

    let banner = start_cluster(&mut ctx, existing, &config, prep[0], &mut notes);
    let idle_cpu = ctx
        .cluster
        .as_ref()
        .ok()
        .and_then(|c| idle_cpu_rate(c.as_ref()));
    if let Some(rate) = idle_cpu {
        notes.push(format!(
            "At rest, before the first step, the measured daemons used {rate:.3} CPU seconds \
             per second (leases, monitor polling, map watches); every step's CPU figure \
             includes that share."
        ));
    }
    if profiles {
        precondition(&mut ctx, &prep[1..], &mut notes);
    }
    let reports: Vec<_> = sections.iter().map(|s| s.run(&mut ctx)).collect();
    let interrupted = release(&mut ctx, &mut notes);

    let environment = Environment {
        cpu_model: environment::cpu_model(),
        cores: environment::cores(),
        kernel: environment::kernel(),
        basalt_version: env!("CARGO_PKG_VERSION").into(),
        git_commit: environment::git_commit(),
        fio_version: fio::version(),
        iperf3_version: environment::tool_version("iperf3"),
        data_dir: display_abs(&opts.data_dir),
        disk_direct_io: disk_direct,
        target_size_bytes: settings.size_bytes,
        pool: match existing {
            Some(cluster) => cluster.pool(),
            None => PoolSettings {
                osds: config.osds,
                replicas: config.replicas,
                pgs: config.pgs,
                object_size: config.object_size.clone(),
                osd_size: config.osd_size.clone(),
                banner,
                ..PoolSettings::default()
            },
        },
        existing: info,
        idle_cpu_seconds_per_second: idle_cpu,
    };
    let results = Results {
        format_version: FORMAT_VERSION,
        generated_utc,
        command: opts.command_line.clone(),
        quick: opts.quick || opts.smoke,
        duration_s: started.elapsed().as_secs_f64(),
        runtime_s: settings.runtime_s,
        environment,
        notes,
        sections: reports,
    };
    finish(&opts.out, &results, interrupted)
}

/// The run's directories: `OUT/raw`, and a scratch directory under the data directory
/// (only this user may enter it: the bench volume's NBD socket lives there), removed
/// however the run ends.
struct Dirs {
    raw: PathBuf,
    /// The scratch directory, canonical.
    work: PathBuf,
    _cleanup: RemoveOnDrop,
}

impl Dirs {
    fn make(opts: &StorageOptions) -> anyhow::Result<Dirs> {
        let raw = opts.out.join("raw");
        std::fs::create_dir_all(&raw).with_context(|| format!("create {}", raw.display()))?;
        std::fs::create_dir_all(&opts.data_dir)
            .with_context(|| format!("create {}", opts.data_dir.display()))?;
        let work = opts
            .data_dir
            .join(format!("basalt-bench-{}", std::process::id()));
        std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
        let cleanup = RemoveOnDrop(work.clone());
        std::fs::set_permissions(&work, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .with_context(|| format!("restrict {}", work.display()))?;
        let work = work
            .canonicalize()
            .with_context(|| format!("resolve {}", work.display()))?;
        Ok(Dirs {
            raw,
            work,
            _cleanup: cleanup,
        })
    }
}

/// The `basalt up` a local run starts: 3 OSDs of 3 replicas, stores large enough for the
/// volume and for the strmvol section's buckets when it runs.
fn cluster_config(opts: &StorageOptions, settings: &Settings) -> ClusterConfig {
    let strmvol_bytes = if opts.runs(crate::sections::strmvol::ID) {
        strmvol_section(opts).store_bytes()
    } else {
        0
    };
    let osd_bytes = MIN_OSD_SIZE_BYTES
        .max(settings.size_bytes * 2)
        .max(strmvol_bytes);
    ClusterConfig {
        osds: 3,
        replicas: 3,
        ec: None,
        pgs: 32,
        object_size: "128K".into(),
        osd_size: format_size(osd_bytes),
        volume_size: format_size(settings.size_bytes),
        s3: true,
        nvmf: opts.runs(crate::sections::nvmf::ID),
        up_args: opts.up_args.clone(),
    }
}

fn strmvol_section(opts: &StorageOptions) -> StrmvolSection {
    StrmvolSection {
        scale: opts.scale(),
    }
}

/// The sections `opts` selects, in run order.
fn sections<'a>(
    opts: &StorageOptions,
    settings: &Settings,
    config: &ClusterConfig,
    existing: Option<&'a dyn ExistingCluster>,
    info: Option<&ExistingClusterInfo>,
) -> Vec<Box<dyn Section + 'a>> {
    let network: Box<dyn Section + 'a> = match (existing, info) {
        (Some(cluster), Some(info)) => Box::new(NetworkSection::Hosts {
            hosts: info.hosts.clone(),
            cluster,
        }),
        _ => Box::new(NetworkSection::Loopback),
    };
    let scaling = if existing.is_some() {
        ScalingSection::skipped(opts.scaling_plan(), config, scaling::NOT_ON_EXISTING)
    } else {
        ScalingSection::new(opts.scaling_plan(), config)
    };
    let by_size = |smoke, quick, full| {
        if opts.smoke {
            smoke
        } else if opts.quick {
            quick
        } else {
            full
        }
    };
    let guest_dir = opts
        .guest_dir
        .clone()
        .or_else(crate::sections::plasmavmc::PlasmaVmcSection::default_guest_dir);
    let all: Vec<Box<dyn Section + 'a>> = vec![
        network,
        Box::new(ProfilesSection::basic()),
        Box::new(ProfilesSection::torus()),
        Box::new(ProfilesSection::vitastor(settings)),
        Box::new(scaling),
        Box::new(crate::sections::s3::S3Section {
            scale: opts.scale(),
        }),
        Box::new(strmvol_section(opts)),
        Box::new(crate::sections::plasmavmc::PlasmaVmcSection {
            image_data_bytes: by_size(16 << 20, 128 << 20, 512 << 20),
            guest_fio_s: opts.scale().pick(1, 5, 5),
            guest_dir: guest_dir.clone(),
        }),
        Box::new(crate::sections::nvmf::NvmfSection {
            fio_s: by_size(1, 3, 10) as u32,
            guest_dir,
        }),
        Box::new(crate::sections::memory::MemorySection {
            scale: opts.scale(),
        }),
        Box::new(crate::sections::security::SecuritySection {
            quick: opts.quick,
            smoke: opts.smoke,
        }),
        Box::new(crate::sections::metrics_cost::MetricsSection {
            quick: opts.quick,
            smoke: opts.smoke,
        }),
    ];
    all.into_iter().filter(|s| opts.runs(s.id())).collect()
}

/// Plan every step for the progress bar and print the run's size; returns the planned
/// seconds of the preparation steps (start, then one precondition per target when profile
/// sections run).
fn plan_progress(
    ctx: &mut Ctx,
    sections: &[Box<dyn Section + '_>],
    profiles: bool,
    opts: &StorageOptions,
) -> Vec<f64> {
    let precondition_s = ctx.settings.size_bytes as f64 / (300u64 << 20) as f64 + 1.0;
    let plans: Vec<Vec<f64>> = sections.iter().map(|s| s.plan(ctx)).collect();
    let prep = if profiles {
        vec![START_S, precondition_s, precondition_s]
    } else {
        vec![START_S]
    };
    let steps = prep.len() + plans.iter().map(Vec::len).sum::<usize>();
    let planned = prep.iter().sum::<f64>() + plans.iter().flatten().sum::<f64>();
    ctx.progress = Progress::new(steps, planned, false);
    eprintln!(
        "basalt bench storage: {steps} steps, about {}; output in {}",
        crate::progress::format_duration(planned),
        opts.out.display()
    );
    prep
}

/// The report's notes known before the first step.
fn first_notes(
    opts: &StorageOptions,
    info: Option<&ExistingClusterInfo>,
    disk_direct: bool,
) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(ids) = &opts.sections {
        notes.push(format!(
            "Only these sections ran (`--sections`): {}.",
            ids.join(", ")
        ));
    }
    if let Some(info) = info {
        notes.extend(info.notes.iter().cloned());
    }
    if !disk_direct {
        notes.push(format!(
            "{} does not support O_DIRECT: the disk baseline ran buffered (direct=0).",
            opts.data_dir.display()
        ));
    }
    notes
}

/// Start `basalt up` (or create and serve the bench volume of the existing cluster) into
/// `ctx.cluster`; a failure becomes a note. Returns `basalt up`'s banner line.
fn start_cluster(
    ctx: &mut Ctx,
    existing: Option<&dyn ExistingCluster>,
    config: &ClusterConfig,
    planned_s: f64,
    notes: &mut Vec<String>,
) -> Option<String> {
    let mut banner = None;
    ctx.cluster = match existing {
        None => {
            ctx.progress.step("start basalt up", planned_s);
            UpProcess::start(
                &ctx.work_dir.join("basalt-data"),
                &ctx.raw_dir.join("basalt-up.log"),
                config,
            )
            .map(|c| {
                banner = c.banner.clone();
                Box::new(c) as Box<dyn UnderTest>
            })
        }
        Some(cluster) => {
            ctx.progress.step(
                "create the bench volume and serve it over NBD from this process",
                planned_s,
            );
            cluster.serve_volume(ctx.settings.size_bytes, &ctx.work_dir)
        }
    }
    .map_err(|e| format!("{e:#}"));
    if let Err(e) = &ctx.cluster {
        ctx.progress.note(&format!("failed: {e}"));
        let what = match existing {
            None => "`basalt up` did not start",
            Some(_) => "The bench volume could not be created and served",
        };
        notes.push(format!("{what}: {e}. Every Basalt figure is missing."));
    }
    banner
}

/// Write the disk test file and the Basalt volume once over their whole size (reads must
/// find written data), each step planned at `planned_s`.
fn precondition(ctx: &mut Ctx, planned_s: &[f64], notes: &mut Vec<String>) {
    let bound = fio::fill_bound(ctx.settings.size_bytes);
    for (side, planned) in [Side::Disk, Side::Basalt].into_iter().zip(planned_s) {
        ctx.progress.step(
            &format!("precondition: write the {} once", target_name(side)),
            *planned,
        );
        if let Some(e) = ctx.fio_once("precondition", &fio::FILL, side, bound).error {
            notes.push(format!(
                "Preconditioning the {} failed: {e}",
                target_name(side)
            ));
        }
    }
}

/// Release the cluster (stop `basalt up`, remove the bench volume) before the report is
/// written, so its shutdown is in no figure and the report says how the clean-up went.
/// Returns whether the run was interrupted.
fn release(ctx: &mut Ctx, notes: &mut Vec<String>) -> bool {
    if let Ok(cluster) = ctx.cluster.as_mut() {
        ctx.progress.note("releasing the cluster");
        notes.extend(cluster.close());
    }
    ctx.cluster = Err("stopped".into());
    let interrupted = interrupt::requested();
    if interrupted {
        notes.push(
            "The run was interrupted (Ctrl-C): the steps after it have no figure.".to_string(),
        );
    }
    interrupted
}

/// Write the outputs and say where the report is; an interrupted run is an error that
/// names it.
fn finish(out: &Path, results: &Results, interrupted: bool) -> anyhow::Result<PathBuf> {
    write_outputs(out, results)?;
    let report_path = out.join("report.md");
    if interrupted {
        bail!(
            "interrupted (Ctrl-C); the report of what was measured is {}",
            report_path.display()
        );
    }
    eprintln!(
        "done in {}: {} ({} failed steps)",
        crate::progress::format_duration(results.duration_s),
        report_path.display(),
        results.failures().len()
    );
    Ok(report_path)
}

/// CPU seconds per second the cluster's daemons use with no client I/O, over
/// [`IDLE_SAMPLE_S`]; `None` when they could not be read.
fn idle_cpu_rate(cluster: &dyn UnderTest) -> Option<f64> {
    let sources = cluster.cpu_sources();
    let started = Instant::now();
    let before = crate::cpu::sample(&sources);
    std::thread::sleep(std::time::Duration::from_secs(IDLE_SAMPLE_S));
    let after = crate::cpu::sample(&sources);
    let spent = crate::cpu::cost(&before, &after, 0, 0)?.cpu_seconds;
    Some(spent / started.elapsed().as_secs_f64())
}

fn target_name(side: Side) -> &'static str {
    match side {
        Side::Disk => "disk test file",
        Side::Basalt => "Basalt volume",
    }
}

fn display_abs(p: &Path) -> String {
    p.canonicalize()
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// Write `results.json`, the plots and `report.md` into `out`.
pub fn write_outputs(out: &Path, results: &Results) -> anyhow::Result<()> {
    let write = |name: &str, text: &str| -> anyhow::Result<()> {
        let path = out.join(name);
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))
    };
    write(
        "results.json",
        &serde_json::to_string_pretty(results).context("serialize results")?,
    )?;
    write(svg::LATENCY_FILE, &svg::latency(results)?)?;
    write(svg::THROUGHPUT_FILE, &svg::throughput(results)?)?;
    write(svg::SCALING_FILE, &svg::scaling(results)?)?;
    write("report.md", &report::render(results))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(sections: Option<&[&str]>) -> StorageOptions {
        StorageOptions {
            data_dir: ".".into(),
            out: "out".into(),
            quick: true,
            smoke: false,
            sections: sections.map(|ids| ids.iter().map(|s| s.to_string()).collect()),
            command_line: String::new(),
            guest_dir: None,
            up_args: Vec::new(),
        }
    }

    #[test]
    fn sections_are_chosen_by_id() {
        // Goal: --sections runs exactly the sections it names, refuses unknown ones with
        // the list of real ones, and runs everything but the opt-in ones when absent.
        let quick = options(None);
        assert!(SECTION_IDS.iter().all(|id| quick.runs(id)
            != (OPT_IN_SECTIONS.contains(id) || NOT_QUICK_SECTIONS.contains(id))));
        let all = StorageOptions {
            quick: false,
            ..options(None)
        };
        assert!(SECTION_IDS
            .iter()
            .all(|id| all.runs(id) != OPT_IN_SECTIONS.contains(id)));
        let smoke = StorageOptions {
            smoke: true,
            ..options(None)
        };
        assert!(smoke.runs("memory") && !quick.runs("memory") && all.runs("memory"));
        assert!(
            options(Some(&["memory"])).runs("memory"),
            "named, it runs in --quick"
        );
        assert!(options(Some(&["security"])).runs("security"));
        assert!(!all.runs("metrics") && options(Some(&["metrics"])).runs("metrics"));
        let some = options(Some(&["network", "scaling"]));
        assert!(some.check_sections().is_ok());
        assert!(some.runs("network") && some.runs("scaling") && !some.runs("disk"));
        let e = options(Some(&["network", "swift"]))
            .check_sections()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown section \"swift\"; the sections are network, disk, torus, vitastor, \
             scaling, s3, strmvol, plasmavmc, nvmf, memory, security, metrics"
        );
        assert!(options(Some(&[])).check_sections().is_err());
    }
}
