//! `report.md` in the style of the seed reports: how it was generated, a table per section
//! with each Basalt figure beside its baseline and as a percentage of it, CPU cost, and an
//! Assessment that states the ratios in sentences.

use crate::results::{Figure, Results, Row, SectionLayout, SectionReport, SectionStatus};
use crate::sections::scaling;
use crate::svg;
use basalt_proto::size::human_bytes;
use std::fmt::Write;

/// How the stores of the `basalt up` under test did their I/O, from its banner's
/// "(I/O MODE)" (None: an existing cluster, or an older banner).
fn store_io(r: &Results) -> Option<String> {
    let banner = r.environment.pool.banner.as_deref()?;
    let at = banner.rfind("(I/O ")? + "(I/O ".len();
    Some(banner[at..].trim_end_matches(')').to_owned())
}

/// A figure's value with its unit, as the tables print it.
pub fn format_value(value: f64, unit: &str) -> String {
    match unit {
        "IOPS" => format!("{value:.0} IOPS"),
        "MiB/s" => format!("{value:.2} MiB/s"),
        "us" => format!("{value:.1} us"),
        "retransmits" => format!("{value:.0}"),
        "B" => format!("{value:.1} B"),
        _ => format!("{value:.3} {unit}"),
    }
}

/// A table cell: the value with its unit, `failed`, or `-` when the row has no such figure.
pub fn cell(f: &Option<Figure>, unit: &str) -> String {
    match f {
        None => "-".into(),
        Some(Figure { value: Some(v), .. }) => format_value(*v, unit),
        Some(Figure { error: Some(_), .. }) => "failed".into(),
        Some(_) => "n/a".into(),
    }
}

fn percent(row: &Row) -> String {
    row.percent_of_baseline()
        .map(|p| format!("{p:.0}%"))
        .unwrap_or_else(|| "-".into())
}

/// Render the whole report.
pub fn render(r: &Results) -> String {
    let mut s = String::new();
    let e = &r.environment;
    let _ = writeln!(s, "# Storage Benchmarks\n");
    let _ = writeln!(s, "Generated on {} with:\n", r.generated_utc);
    let _ = writeln!(s, "```bash\n{}\n```\n", r.command);
    let _ = writeln!(
        s,
        "Machine: {} ({} cores), kernel {}. Basalt {}{}. fio: {}. iperf3: {}.\n",
        e.cpu_model,
        e.cores,
        e.kernel,
        e.basalt_version,
        e.git_commit
            .as_ref()
            .map(|c| format!(" (commit {c})"))
            .unwrap_or_default(),
        e.fio_version.as_deref().unwrap_or("not found"),
        e.iperf3_version.as_deref().unwrap_or("not installed"),
    );
    let _ = writeln!(s, "{}\n", cluster_paragraph(r));
    for n in &r.notes {
        let _ = writeln!(s, "- {n}");
    }
    if !r.notes.is_empty() {
        s.push('\n');
    }
    for sec in &r.sections {
        render_section(&mut s, sec);
    }
    render_cpu(&mut s, r);
    render_failures(&mut s, r);
    let _ = writeln!(s, "## Plots\n");
    let _ = writeln!(
        s,
        "![Latency distribution]({})\n\n![Throughput by profile]({})\n\n![Scaling curve]({})\n",
        svg::LATENCY_FILE,
        svg::THROUGHPUT_FILE,
        svg::SCALING_FILE
    );
    render_assessment(&mut s, r);
    let _ = writeln!(s, "## Files\n");
    let _ = writeln!(
        s,
        "`results.json` holds every figure, the exact command lines and the environment; \
         `raw/` holds each step's fio output (`*.json`, `*.stderr`){}. Compare two runs with \
         `basalt bench compare A/results.json B/results.json`.",
        if r.environment.existing.is_some() {
            " and the iperf3 outputs"
        } else {
            " and the `basalt up` log"
        }
    );
    s
}

/// Which cluster was measured, its settings, and how the targets were sized and run.
fn cluster_paragraph(r: &Results) -> String {
    let e = &r.environment;
    let p = &e.pool;
    let cluster = match &e.existing {
        None => format!(
            "Cluster: `basalt up` on this host, {} OSDs, {} replicas, {} PGs, {} objects, data \
             in `{}`.",
            p.osds, p.replicas, p.pgs, p.object_size, e.data_dir
        ),
        Some(x) => {
            let hosts: Vec<String> = x.hosts.iter().map(|h| h.label()).collect();
            format!(
                "Cluster: the existing cluster at `{}`, pool `{}`: {} replicas (min_size {}), \
                 {} PGs, {} objects, failure domain {}; {} OSDs up on {} hosts ({}), stores of \
                 {}{}. The benchmark created its volume in that pool, served it over NBD from \
                 its own process (the client library and the gateway `basalt nbd` runs, on a \
                 unix socket) and removed it afterwards. The disk baseline is this host's \
                 disk under `{}`.",
                x.meta_url,
                p.name.as_deref().unwrap_or("?"),
                p.replicas,
                p.min_size.map_or("?".to_string(), |m| m.to_string()),
                p.pgs,
                p.object_size,
                p.failure_domain.as_deref().unwrap_or("?"),
                p.osds,
                x.hosts.len(),
                hosts.join(", "),
                p.osd_size,
                if x.osds_down.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (down: {})",
                        x.osds_down
                            .iter()
                            .map(|id| format!("osd.{id}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
                e.data_dir
            )
        }
    };
    format!(
        "{cluster} Target size {} (disk test file and Basalt volume, each written once before \
         the runs). {} s per timed fio run{}; the disk baseline {}.",
        human_bytes(e.target_size_bytes),
        r.runtime_s,
        if r.quick { " (quick mode)" } else { "" },
        if e.disk_direct_io {
            "uses O_DIRECT (`direct=1`)"
        } else {
            "runs buffered (`direct=0`): the filesystem does not support O_DIRECT"
        },
    )
}

fn render_section(s: &mut String, sec: &SectionReport) {
    let _ = writeln!(s, "## {}\n", sec.title);
    let _ = writeln!(s, "{}\n", sec.intro);
    if let SectionStatus::NotMeasured { reason } = &sec.status {
        let _ = writeln!(s, "**{}**\n", capitalize(reason));
        return;
    }
    match sec.layout {
        SectionLayout::Comparison => render_comparison(s, sec),
        SectionLayout::Scaling => s.push_str(&scaling::render_tables(sec)),
    }
    for n in &sec.notes {
        let _ = writeln!(s, "Note: {n}\n");
    }
}

/// The table of a comparison section: each Basalt figure beside its baseline.
fn render_comparison(s: &mut String, sec: &SectionReport) {
    let compared = sec.rows.iter().any(|r| r.basalt.is_some());
    if compared {
        // The memory section measures a store, not a volume.
        let measured = if sec.id == crate::sections::memory::ID {
            "Basalt store"
        } else {
            "Basalt volume"
        };
        let _ = writeln!(
            s,
            "| Metric | {} | {measured} | Basalt / {} |\n|---|---:|---:|---:|",
            sec.baseline_name,
            sec.baseline_name.to_lowercase()
        );
        for r in &sec.rows {
            let label = if r.higher_is_better {
                r.label.clone()
            } else {
                format!("{} (lower is better)", r.label)
            };
            let _ = writeln!(
                s,
                "| {label} | {} | {} | {} |",
                cell(&r.baseline, &r.unit),
                cell(&r.basalt, &r.unit),
                percent(r)
            );
        }
    } else {
        let _ = writeln!(s, "| Metric | Result |\n|---|---:|");
        for r in &sec.rows {
            let _ = writeln!(s, "| {} | {} |", r.label, cell(&r.baseline, &r.unit));
        }
    }
    s.push('\n');
}

/// Sections whose baseline is measured (local disk, loopback TCP): the ones the disk
/// comparisons of the Assessment and the throughput plot draw from.
pub fn comparisons(r: &Results) -> impl Iterator<Item = &SectionReport> {
    r.sections
        .iter()
        .filter(|sec| sec.layout == SectionLayout::Comparison)
}

fn capitalize(t: &str) -> String {
    let mut c = t.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// The Basalt figures that carry a CPU measurement, one per fio run.
fn cpu_runs(r: &Results) -> Vec<(String, &Figure)> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for sec in &r.sections {
        for row in &sec.rows {
            if let Some(f) = &row.basalt {
                if f.cpu.is_some() && seen.insert(f.raw.clone()) {
                    let label = row
                        .label
                        .trim_end_matches(" (read)")
                        .trim_end_matches(" latency");
                    out.push((label.to_string(), f));
                }
            }
        }
    }
    out
}

fn render_cpu(s: &mut String, r: &Results) {
    let _ = writeln!(s, "## CPU cost of Basalt\n");
    if r.environment.existing.is_some() {
        let _ = writeln!(
            s,
            "CPU seconds (user + system, all threads) the cluster's daemons used during each \
             Basalt step, per GiB moved and per 1000 IOs: every OSD that was up, read from \
             `process_cpu_seconds_total` on its `/metrics` (the address in its liveness \
             record) before and after the step, plus this benchmark's own process, which \
             serves the volume over NBD (its driver threads mostly sleep while fio runs), from \
             `/proc/self/stat`. Other `basalt nbd` gateways and monitors are not in the data \
             path and not counted; neither is fio's own CPU.\n"
        );
    } else {
        let _ = writeln!(
            s,
            "CPU seconds (user + system, all threads) the `basalt up` process used during \
             each Basalt step, from `/proc/PID/stat`, per GiB moved and per 1000 IOs. The \
             process holds all OSDs, the gateway and the NBD server; fio's own CPU is not \
             counted.\n"
        );
    }
    let runs = cpu_runs(r);
    if runs.is_empty() {
        let _ = writeln!(
            s,
            "No Basalt step completed, so no CPU cost was measured.\n"
        );
        return;
    }
    let _ = writeln!(
        s,
        "| Profile | CPU s | Moved | IOs | CPU s / GiB | CPU s / 1000 IOs | CPU µs / IO |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    for (label, f) in runs {
        let (Some(cpu), Some(fio)) = (&f.cpu, &f.fio) else {
            continue;
        };
        let opt = |v: Option<f64>| v.map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into());
        // CPU seconds per 1000 IOs are milliseconds per IO: the same figure in µs.
        let us_per_io = cpu
            .per_1000_ios
            .map(|x| format!("{:.1}", x * 1000.0))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            s,
            "| {label} | {:.2} | {} | {} | {} | {} | {us_per_io} |",
            cpu.cpu_seconds,
            human_bytes(fio.io_bytes),
            fio.total_ios,
            opt(cpu.per_gib),
            opt(cpu.per_1000_ios)
        );
    }
    s.push('\n');
    render_daemons(s, &cpu_runs(r));
}

/// Each daemon's CPU over every Basalt step and its last resident memory, when the steps
/// were charged to more than one daemon; and the daemons that could not always be read.
fn render_daemons(s: &mut String, runs: &[(String, &Figure)]) {
    let mut daemons: Vec<(String, f64, Option<u64>)> = Vec::new();
    let mut missing: Vec<String> = Vec::new();
    for cpu in runs.iter().filter_map(|(_, f)| f.cpu.as_ref()) {
        for d in &cpu.daemons {
            match daemons.iter_mut().find(|(name, ..)| *name == d.name) {
                Some(entry) => {
                    entry.1 += d.cpu_seconds;
                    entry.2 = d.resident_bytes.or(entry.2);
                }
                None => daemons.push((d.name.clone(), d.cpu_seconds, d.resident_bytes)),
            }
        }
        for m in &cpu.missing {
            if !missing.contains(m) {
                missing.push(m.clone());
            }
        }
    }
    if daemons.len() > 1 {
        let total: f64 = daemons.iter().map(|d| d.1).sum();
        let _ = writeln!(
            s,
            "By daemon, over every Basalt step:\n\n| Daemon | CPU s | Share | Resident memory \
             after the last step |\n|---|---:|---:|---:|"
        );
        for (name, cpu, rss) in &daemons {
            let share = if total > 0.0 {
                cpu / total * 100.0
            } else {
                0.0
            };
            let rss = rss.map_or("-".to_string(), human_bytes);
            let _ = writeln!(s, "| {name} | {cpu:.2} | {share:.0}% | {rss} |");
        }
        s.push('\n');
    }
    if !missing.is_empty() {
        let _ = writeln!(
            s,
            "Not counted in some steps (their CPU could not be read): {}.\n",
            missing.join("; ")
        );
    }
}

fn render_failures(s: &mut String, r: &Results) {
    let failures = r.failures();
    if failures.is_empty() {
        return;
    }
    let _ = writeln!(s, "## Failed steps\n");
    let _ = writeln!(s, "| Section | Step | Side | Error |\n|---|---|---|---|");
    for (sec, label, side, err) in failures {
        let err = err.replace('|', "\\|").replace('\n', " ");
        let _ = writeln!(s, "| {sec} | {label} | {side} | {err} |");
    }
    s.push('\n');
}

fn render_assessment(s: &mut String, r: &Results) {
    let _ = writeln!(s, "## Assessment\n");
    let mut throughput_pcts = Vec::new();
    for sec in comparisons(r) {
        let compared: Vec<&Row> = sec
            .rows
            .iter()
            .filter(|row| row.percent_of_baseline().is_some())
            .collect();
        if compared.is_empty() {
            continue;
        }
        let mut sentences = Vec::new();
        for row in compared {
            let pct = row.percent_of_baseline().unwrap_or(0.0);
            let v = row.basalt.as_ref().and_then(|f| f.value).unwrap_or(0.0);
            let b = row.baseline.as_ref().and_then(|f| f.value).unwrap_or(0.0);
            let base = sec.baseline_name.to_lowercase();
            if sec.id == crate::sections::metrics_cost::ID {
                sentences.push(format!(
                    "{}: {pct:.0}% of the figure with metrics off ({} vs {}).",
                    row.label,
                    format_value(v, &row.unit),
                    format_value(b, &row.unit)
                ));
            } else if sec.id == crate::sections::memory::ID {
                let verdict = if v <= b { "within" } else { "over" };
                sentences.push(format!(
                    "{}: {} against a goal of at most {} ({pct:.0}% of it: {verdict} the goal).",
                    row.label,
                    format_value(v, &row.unit),
                    format_value(b, &row.unit)
                ));
            } else if sec.id == crate::sections::security::ID {
                // Basalt against Basalt: not a figure relative to the disk.
                sentences.push(format!(
                    "{}: {pct:.0}% of the IOPS without it ({} vs {}).",
                    row.label,
                    format_value(v, &row.unit),
                    format_value(b, &row.unit)
                ));
            } else if row.higher_is_better {
                throughput_pcts.push(pct);
                sentences.push(format!(
                    "{}: Basalt reaches {pct:.0}% of the {base} ({} vs {}).",
                    row.label,
                    format_value(v, &row.unit),
                    format_value(b, &row.unit)
                ));
            } else {
                sentences.push(format!(
                    "{}: Basalt's latency is {pct:.0}% of the {base}'s ({} vs {}; lower is better).",
                    row.label,
                    format_value(v, &row.unit),
                    format_value(b, &row.unit)
                ));
            }
        }
        let _ = writeln!(s, "**{}.** {}\n", sec.title, sentences.join(" "));
    }
    if !throughput_pcts.is_empty() {
        let mut sorted = throughput_pcts.clone();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let median = sorted[sorted.len() / 2];
        let _ = writeln!(
            s,
            "Over the {} throughput and IOPS figures, Basalt's median is {median:.0}% of its \
             row's baseline (from {:.0}% to {:.0}%).\n",
            sorted.len(),
            sorted[0],
            sorted[sorted.len() - 1]
        );
    }
    if let Some(sentence) = network_sentence(r) {
        let _ = writeln!(s, "{sentence}\n");
    }
    for sec in r
        .sections
        .iter()
        .filter(|sec| sec.layout == SectionLayout::Scaling)
    {
        if let Some(paragraph) = scaling::assessment(sec) {
            let _ = writeln!(s, "{paragraph}\n");
        }
    }
    let runs = cpu_runs(r);
    let per_gib: Vec<f64> = runs
        .iter()
        .filter_map(|(_, f)| f.cpu.as_ref()?.per_gib)
        .collect();
    let per_kio: Vec<f64> = runs
        .iter()
        .filter_map(|(_, f)| f.cpu.as_ref()?.per_1000_ios)
        .collect();
    if let (Some(g), Some(k)) = (range(&per_gib), range(&per_kio)) {
        let _ = writeln!(
            s,
            "Basalt spent {:.3} to {:.3} CPU seconds per GiB moved and {:.4} to {:.4} CPU \
             seconds per 1000 IOs across its steps (large blocks are cheapest per GiB, small \
             blocks per IO).\n",
            g.0, g.1, k.0, k.1
        );
    }
    let quick = if r.quick {
        format!(
            " This was a quick run ({} s per step): treat its figures as indicative.",
            r.runtime_s
        )
    } else {
        String::new()
    };
    let replicas = r.environment.pool.replicas;
    if r.environment.existing.is_some() {
        let _ = writeln!(
            s,
            "Caveats: the disk baseline is this host's disk, not the storage hosts'. Every \
             Basalt write crosses the network to its primary and from there to {} other \
             hosts' disks before it is acknowledged; reads are served by one replica. fio and \
             the benchmark's NBD gateway share this host's CPU. Compare ratios within one \
             run, not absolute numbers between runs.{quick}\n",
            replicas.saturating_sub(1)
        );
    } else {
        let _ = writeln!(
            s,
            "Caveats: this is one host. The {replicas} replicas of every Basalt write land on \
             the same disk the baseline has to itself, and replication crosses loopback, so \
             write figures include {replicas}x write amplification; reads are served by one \
             replica. The virtual disk of this kind of machine is noisy, so compare ratios \
             within one run, not absolute numbers between runs.{quick}\n"
        );
    }
    let above: Vec<String> = comparisons(r)
        .filter(|sec| {
            sec.id != crate::sections::security::ID && sec.id != crate::sections::metrics_cost::ID
        })
        .flat_map(|sec| sec.rows.iter())
        .filter(|row| row.higher_is_better && row.percent_of_baseline().is_some_and(|p| p > 100.0))
        .map(|row| row.label.clone())
        .collect();
    let baseline = if r.environment.disk_direct_io {
        "O_DIRECT"
    } else {
        "buffered I/O"
    };
    let cached = if above.is_empty() {
        String::new()
    } else {
        format!(
            ": the figures above 100% of the disk ({}) are page-cache reads, not a faster disk",
            above.join(", ")
        )
    };
    match store_io(r).as_deref() {
        Some(io) if io.starts_with("direct") => {
            let _ = writeln!(
                s,
                "Basalt's stores use direct I/O ({io}: no page cache) with an fdatasync per \
                 write batch on every replica, while the disk baseline uses {baseline} without \
                 fsync: Basalt writes pay for durability the baseline's writes do not.\n"
            );
        }
        io => {
            let _ = writeln!(
                s,
                "Basalt's store files go through the page cache{} (with an fdatasync per write \
                 batch on every replica), while the disk baseline uses {baseline} without \
                 fsync. Basalt reads can therefore come from memory{cached}, and Basalt writes \
                 pay for durability the baseline's writes do not.\n",
                io.map(|io| format!(" ({io})")).unwrap_or_default()
            );
        }
    }
    for sec in &r.sections {
        if let SectionStatus::NotMeasured { reason } = &sec.status {
            let _ = writeln!(s, "{}: {reason}.\n", sec.title);
        }
    }
    let failed = r.failures().len();
    if failed > 0 {
        let _ = writeln!(
            s,
            "{failed} step(s) failed and have no figure; see Failed steps and `raw/`.\n"
        );
    }
}

fn range(v: &[f64]) -> Option<(f64, f64)> {
    let min = v.iter().copied().reduce(f64::min)?;
    let max = v.iter().copied().reduce(f64::max)?;
    Some((min, max))
}

/// The network baseline against Basalt's best sequential read throughput through NBD:
/// loopback TCP for a local cluster, the fastest storage host for an existing one.
fn network_sentence(r: &Results) -> Option<String> {
    let paths: Vec<(String, f64)> = r
        .sections
        .iter()
        .find(|s| s.id == "network")?
        .rows
        .iter()
        .filter(|row| row.unit == "MiB/s")
        .filter_map(|row| Some((row.label.clone(), row.baseline.as_ref()?.value?)))
        .collect();
    let (label, best) = comparisons(r)
        .flat_map(|s| s.rows.iter())
        .filter(|row| row.unit == "MiB/s" && row.label.contains("read"))
        .filter_map(|row| Some((row.label.clone(), row.basalt.as_ref()?.value?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    let fastest = paths.iter().map(|p| p.1).reduce(f64::max)?;
    if fastest <= 0.0 {
        return None;
    }
    let basalt = format!(
        "Basalt's best read throughput through NBD ({label}, {})",
        format_value(best, "MiB/s")
    );
    let pct = best / fastest * 100.0;
    if r.environment.existing.is_none() {
        return Some(format!(
            "Loopback TCP carries {}; {basalt} is {pct:.0}% of it.",
            format_value(fastest, "MiB/s")
        ));
    }
    let slowest = paths.iter().map(|p| p.1).reduce(f64::min)?;
    Some(format!(
        "From the storage hosts to this host the network carried {} to {} ({} hosts); \
         {basalt} is {pct:.0}% of the fastest host's.",
        format_value(slowest, "MiB/s"),
        format_value(fastest, "MiB/s"),
        paths.len()
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::results::*;

    fn fig(v: f64) -> Option<Figure> {
        Some(Figure {
            value: Some(v),
            command: Some("fio --name=bench".into()),
            raw: Some(format!("raw/{v}.json")),
            fio: Some(FioSummary {
                read_iops: v,
                io_bytes: 1 << 30,
                total_ios: 1000,
                clat_percentiles_us: vec![(50.0, 20.0), (99.0, 80.0), (99.99, 300.0)],
                ..FioSummary::default()
            }),
            cpu: Some(CpuCost::new(0.5, 1 << 30, 1000)),
            ..Figure::default()
        })
    }

    /// A small but complete set of results, shared by the report, SVG and compare tests.
    pub(crate) fn sample() -> Results {
        let row = |key: &str, label: &str, unit: &str, hib: bool, b: f64, v: f64| Row {
            key: key.into(),
            label: label.into(),
            unit: unit.into(),
            higher_is_better: hib,
            baseline: fig(b),
            basalt: fig(v),
        };
        Results {
            format_version: FORMAT_VERSION,
            generated_utc: "2026-11-22T05:30:00Z".into(),
            command: "basalt bench storage --quick".into(),
            quick: true,
            duration_s: 120.0,
            runtime_s: 3,
            environment: Environment {
                cpu_model: "Test CPU".into(),
                cores: 2,
                pool: PoolSettings {
                    osds: 3,
                    replicas: 3,
                    ..PoolSettings::default()
                },
                ..Environment::default()
            },
            notes: vec![],
            sections: vec![
                SectionReport {
                    id: "network".into(),
                    title: "Network baseline".into(),
                    intro: "Loopback.".into(),
                    baseline_name: "Loopback TCP".into(),
                    status: SectionStatus::Measured,
                    layout: SectionLayout::Comparison,
                    notes: vec![],
                    rows: vec![Row {
                        basalt: None,
                        ..row(
                            "tcp_throughput",
                            "TCP throughput",
                            "MiB/s",
                            true,
                            4000.0,
                            0.0,
                        )
                    }],
                },
                SectionReport {
                    id: "disk".into(),
                    title: "Local disk vs Basalt volume".into(),
                    intro: "Same profiles.".into(),
                    baseline_name: "Local disk".into(),
                    status: SectionStatus::Measured,
                    layout: SectionLayout::Comparison,
                    notes: vec![],
                    rows: vec![
                        row(
                            "seqread_1m_mib_s",
                            "Sequential read (1M, QD1)",
                            "MiB/s",
                            true,
                            1000.0,
                            500.0,
                        ),
                        row(
                            "randread_4k_qd1_iops",
                            "4k random read (QD1)",
                            "IOPS",
                            true,
                            10000.0,
                            12000.0,
                        ),
                        row(
                            "t1q1_read_lat_us",
                            "4k T1Q1 random read latency",
                            "us",
                            false,
                            50.0,
                            100.0,
                        ),
                        Row {
                            basalt: Some(Figure::failed("fio exited with 1", None, None)),
                            ..row(
                                "randwrite_iops",
                                "4k random write",
                                "IOPS",
                                true,
                                5000.0,
                                0.0,
                            )
                        },
                    ],
                },
                crate::sections::scaling::tests::sample_section(),
                SectionReport {
                    id: "s3".into(),
                    title: "S3 gateway".into(),
                    intro: "PUT and GET throughput.".into(),
                    baseline_name: "Local disk".into(),
                    status: SectionStatus::NotMeasured {
                        reason: "not measured: there is no S3 gateway yet".into(),
                    },
                    layout: SectionLayout::Comparison,
                    notes: vec![],
                    rows: vec![],
                },
            ],
        }
    }

    #[test]
    fn report_has_every_section_and_ratio() {
        // Goal: the report shows each section, baseline beside Basalt, the percentage, CPU
        // cost, failures and an Assessment in sentences.
        let md = render(&sample());
        for heading in [
            "# Storage Benchmarks",
            "## Network baseline",
            "## Local disk vs Basalt volume",
            "## Scaling over OSD counts (Simplyblock)",
            "## S3 gateway",
            "## CPU cost of Basalt",
            "## Failed steps",
            "## Plots",
            "## Assessment",
        ] {
            assert!(md.contains(heading), "missing {heading}:\n{md}");
        }
        assert!(md.contains("| Sequential read (1M, QD1) | 1000.00 MiB/s | 500.00 MiB/s | 50% |"));
        assert!(md.contains("| 4k random read (QD1) | 10000 IOPS | 12000 IOPS | 120% |"));
        // CPU per IO as a first-class figure: 0.5 CPU s per 1000 IOs is 500 µs per IO.
        assert!(md.contains("| CPU s / 1000 IOs | CPU µs / IO |"), "{md}");
        assert!(md.contains("| 0.500 | 500.0 |"), "{md}");
        assert!(md.contains("| 4k random write | 5000 IOPS | failed | - |"));
        assert!(md.contains("| TCP throughput | 4000.00 MiB/s |"));
        assert!(md.contains("**Not measured: there is no S3 gateway yet**"));
        assert!(md.contains("S3 gateway: not measured: there is no S3 gateway yet."));
        assert!(
            md.contains("Basalt reaches 50% of the local disk (500.00 MiB/s vs 1000.00 MiB/s).")
        );
        assert!(md.contains("Basalt's latency is 200% of the local disk's"));
        assert!(md.contains("is 12% of it"), "network sentence:\n{md}");
        assert!(md.contains("2 step(s) failed"));
        assert!(md.contains(
            "the figures above 100% of the disk (4k random read (QD1)) are page-cache reads"
        ));
        assert!(md.contains("![Latency distribution](latency.svg)"));
        assert!(md.contains("![Scaling curve](scaling.svg)"));
    }

    #[test]
    fn caveat_says_how_the_stores_did_their_io() {
        // Goal: a run whose `basalt up` said direct I/O is not described as page-cached; one
        // that said buffered (or an older banner) is, with the cached figures named.
        let mut r = sample();
        r.environment.pool.banner =
            Some("Basalt is up: 3 OSDs, data in /d (I/O direct uring)".into());
        let md = render(&r);
        assert!(
            md.contains("Basalt's stores use direct I/O (direct uring: no page cache)"),
            "{md}"
        );
        assert!(!md.contains("go through the page cache"));
        r.environment.pool.banner =
            Some("Basalt is up: 3 OSDs, data in /d (I/O buffered inline)".into());
        let md = render(&r);
        assert!(
            md.contains("go through the page cache (buffered inline)"),
            "{md}"
        );
        assert!(md.contains("are page-cache reads"));
    }

    #[test]
    fn scaling_section_has_its_own_tables_and_paragraph() {
        // Goal: the sweep renders as OSD counts with efficiencies and a schemes table, its
        // failure is listed, and its rows stay out of the local-disk comparisons (median,
        // page-cache list, network sentence).
        let md = render(&sample());
        let section = md
            .split("## Scaling over OSD counts (Simplyblock)")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .unwrap();
        assert!(
            section.contains("| 2 | 18000 IOPS | 90% | 6000 IOPS | 75% |"),
            "{section}"
        );
        assert!(section.contains("| 3 replicas | 22000 IOPS | 2000 IOPS | 300.00 MiB/s |"));
        assert!(
            !section.contains("Basalt volume"),
            "no disk-comparison header"
        );
        assert!(md.contains(
            "| Scaling over OSD counts (Simplyblock) | 4k random write, 3 OSDs, 1 replica | \
             basalt | fio exited with 1 |"
        ));
        assert!(md.contains("**Scaling over OSD counts (Simplyblock).** With 1 replica,"));
        assert!(!md.contains("of the linear scaling"));
        // The disk sections give 50% and 120%: the sweep's ratios are not in the median.
        assert!(
            md.contains("Over the 2 throughput and IOPS figures"),
            "{md}"
        );
        assert!(md.contains("(4k random read (QD1)) are page-cache reads"));
        assert!(md.contains("(Sequential read (1M, QD1), 500.00 MiB/s)"));
    }

    #[test]
    fn existing_cluster_report_names_the_cluster_hosts_and_daemons() {
        // Goal: a run on an existing cluster says which cluster and pool it measured,
        // compares reads with the fastest storage host's network, splits CPU by daemon,
        // lists daemons it could not read, and gives the multi-host caveats.
        let mut r = sample();
        r.environment.pool = PoolSettings {
            name: Some("fast".into()),
            osds: 6,
            replicas: 3,
            min_size: Some(2),
            failure_domain: Some("host".into()),
            pgs: 64,
            object_size: "128K".into(),
            osd_size: "500G".into(),
            banner: None,
        };
        let host = |ip: &str, name: &str| StorageHost {
            ip: ip.into(),
            names: vec![name.into()],
            osds: vec![0, 1],
        };
        r.environment.existing = Some(ExistingClusterInfo {
            meta_url: "etcd://10.0.0.1:2379/prod".into(),
            hosts: vec![host("10.0.0.2", "a"), host("10.0.0.3", "b")],
            osds_down: vec![7],
            notes: vec![],
        });
        let net = &mut r.sections[0];
        net.rows = ["10_0_0_2", "10_0_0_3"]
            .iter()
            .zip([1000.0, 2000.0])
            .map(|(k, v)| Row {
                key: format!("tcp_throughput_{k}"),
                label: format!("TCP from {k}"),
                unit: "MiB/s".into(),
                higher_is_better: true,
                baseline: Some(Figure {
                    value: Some(v),
                    ..Figure::default()
                }),
                basalt: None,
            })
            .collect();
        let disk = &mut r.sections[1];
        let cpu = disk.rows[0].basalt.as_mut().unwrap().cpu.as_mut().unwrap();
        cpu.daemons = vec![
            DaemonCpu {
                name: "osd.0".into(),
                cpu_seconds: 0.3,
                resident_bytes: Some(64 << 20),
            },
            DaemonCpu {
                name: "basalt bench (NBD gateway)".into(),
                cpu_seconds: 0.2,
                resident_bytes: None,
            },
        ];
        cpu.missing = vec!["osd.1: connection refused".into()];
        let md = render(&r);
        assert!(md.contains(
            "Cluster: the existing cluster at `etcd://10.0.0.1:2379/prod`, pool `fast`: 3 \
             replicas (min_size 2), 64 PGs, 128K objects, failure domain host; 6 OSDs up on 2 \
             hosts (a (10.0.0.2), b (10.0.0.3)), stores of 500G (down: osd.7)."
        ));
        assert!(md.contains("| TCP from 10_0_0_2 | 1000.00 MiB/s |"));
        assert!(md.contains(
            "the network carried 1000.00 MiB/s to 2000.00 MiB/s (2 hosts); Basalt's best read \
             throughput through NBD (Sequential read (1M, QD1), 500.00 MiB/s) is 25% of the \
             fastest host's."
        ));
        assert!(md.contains("`process_cpu_seconds_total` on its `/metrics`"));
        assert!(md.contains("| osd.0 | 0.30 | 60% | 64.0 MiB |"), "{md}");
        assert!(md.contains("| basalt bench (NBD gateway) | 0.20 | 40% | - |"));
        assert!(md.contains("(their CPU could not be read): osd.1: connection refused."));
        assert!(md.contains("from there to 2 other hosts' disks"));
        assert!(!md.contains("this is one host"));
    }
}
