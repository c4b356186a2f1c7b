//! `basalt bench storage`: plan the run, start the cluster, run every section, write the
//! report, the JSON and the plots.

use crate::cluster::{Cluster, ClusterConfig};
use crate::progress::Progress;
use crate::results::{Environment, PoolSettings, Results, FORMAT_VERSION};
use crate::sections::network::NetworkSection;
use crate::sections::profiles::ProfilesSection;
use crate::sections::scaling::{ScalingPlan, ScalingSection};
use crate::sections::{Ctx, Section, Settings, Side};
use crate::{environment, fio, report, size, svg};
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Smallest OSD store capacity passed to `basalt up` (sparse file).
const MIN_OSD_SIZE_BYTES: u64 = 8 << 30;

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
    /// The command line, recorded in the report.
    pub command_line: String,
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

/// Removes the scratch directory however the run ends.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run the whole suite and return the path of `report.md`.
pub fn run_storage(opts: &StorageOptions) -> anyhow::Result<PathBuf> {
    let started = Instant::now();
    let generated_utc = environment::utc_now();
    if environment::which("fio").is_none() {
        bail!("fio is not installed; install it with: apt-get install -y fio iperf3");
    }
    let raw_dir = opts.out.join("raw");
    std::fs::create_dir_all(&raw_dir).with_context(|| format!("create {}", raw_dir.display()))?;
    std::fs::create_dir_all(&opts.data_dir)
        .with_context(|| format!("create {}", opts.data_dir.display()))?;
    let work = opts
        .data_dir
        .join(format!("basalt-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
    let _cleanup = RemoveOnDrop(work.clone());
    let work = work
        .canonicalize()
        .with_context(|| format!("resolve {}", work.display()))?;

    let cores = environment::cores();
    let settings = opts.settings(cores);
    let config = ClusterConfig {
        osds: 3,
        replicas: 3,
        pgs: 32,
        object_size: "128K".into(),
        osd_size: size::exact(MIN_OSD_SIZE_BYTES.max(settings.size_bytes * 2)),
        volume_size: size::exact(settings.size_bytes),
    };
    let disk_direct = environment::supports_direct_io(&work);
    let sections: Vec<Box<dyn Section>> = vec![
        Box::new(NetworkSection),
        Box::new(ProfilesSection::basic()),
        Box::new(ProfilesSection::torus()),
        Box::new(ProfilesSection::vitastor(&settings)),
        Box::new(ScalingSection::new(opts.scaling_plan(), &config)),
    ];
    let precondition_s = settings.size_bytes as f64 / (300u64 << 20) as f64 + 1.0;
    let mut ctx = Ctx {
        settings: settings.clone(),
        out_dir: opts.out.clone(),
        raw_dir,
        work_dir: work.clone(),
        disk_file: work.join("disk-baseline.dat"),
        disk_direct,
        cluster: Err("not started".into()),
        progress: Progress::new(0, 0.0, false),
    };
    let plans: Vec<Vec<f64>> = sections.iter().map(|s| s.plan(&ctx)).collect();
    let prep = [3.0, precondition_s, precondition_s];
    let steps = prep.len() + plans.iter().map(Vec::len).sum::<usize>();
    let planned = prep.iter().sum::<f64>() + plans.iter().flatten().sum::<f64>();
    ctx.progress = Progress::new(steps, planned, false);
    eprintln!(
        "basalt bench storage: {steps} steps, about {}; output in {}",
        crate::progress::format_duration(planned),
        opts.out.display()
    );
    let mut notes = Vec::new();
    if !disk_direct {
        notes.push(format!(
            "{} does not support O_DIRECT: the disk baseline ran buffered (direct=0).",
            opts.data_dir.display()
        ));
    }

    ctx.progress.step("start basalt up", prep[0]);
    ctx.cluster = Cluster::start(
        &work.join("basalt-data"),
        &ctx.raw_dir.join("basalt-up.log"),
        &config,
    )
    .map_err(|e| format!("{e:#}"));
    if let Err(e) = &ctx.cluster {
        ctx.progress.note(&format!("failed: {e}"));
        notes.push(format!(
            "`basalt up` did not start: {e}. Every Basalt figure is missing."
        ));
    }
    let banner = ctx.cluster.as_ref().ok().and_then(|c| c.banner.clone());
    // Reads must find written data: write each target once over its whole size.
    let bound = fio::fill_bound(settings.size_bytes);
    for (i, side) in [Side::Disk, Side::Basalt].into_iter().enumerate() {
        ctx.progress.step(
            &format!("precondition: write the {} once", target_name(side)),
            prep[1 + i],
        );
        if let Some(e) = ctx.fio_once("precondition", &fio::FILL, side, bound).error {
            notes.push(format!(
                "Preconditioning the {} failed: {e}",
                target_name(side)
            ));
        }
    }

    let mut reports = Vec::new();
    for s in &sections {
        reports.push(s.run(&mut ctx));
    }
    // Stop the cluster before writing the report, so its shutdown is not in any figure.
    ctx.cluster = Err("stopped".into());

    let environment = Environment {
        cpu_model: environment::cpu_model(),
        cores,
        kernel: environment::kernel(),
        basalt_version: env!("CARGO_PKG_VERSION").into(),
        git_commit: environment::git_commit(),
        fio_version: fio::version(),
        iperf3_version: environment::tool_version("iperf3"),
        data_dir: display_abs(&opts.data_dir),
        disk_direct_io: disk_direct,
        target_size_bytes: settings.size_bytes,
        pool: PoolSettings {
            osds: config.osds,
            replicas: config.replicas,
            pgs: config.pgs,
            object_size: config.object_size.clone(),
            osd_size: config.osd_size.clone(),
            banner,
        },
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
    write_outputs(&opts.out, &results)?;
    let report_path = opts.out.join("report.md");
    eprintln!(
        "done in {}: {} ({} failed steps)",
        crate::progress::format_duration(results.duration_s),
        report_path.display(),
        results.failures().len()
    );
    Ok(report_path)
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
    write(svg::LATENCY_FILE, &svg::latency(results))?;
    write(svg::THROUGHPUT_FILE, &svg::throughput(results))?;
    write(svg::SCALING_FILE, &svg::scaling(results))?;
    write("report.md", &report::render(results))
}
