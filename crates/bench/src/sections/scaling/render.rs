//! The scaling section read back from its rows (so from `results.json` too): the sweep
//! and schemes tables, the Assessment paragraph and the curves of the scaling plot. A row's
//! configuration comes from its key ([`super::parse_key`]).

use super::{efficiency, parse_key, Redundancy, SWEEP, SWEEP_REPLICAS, WORKLOADS};
use crate::report::{cell, format_value};
use crate::results::{Row, SectionReport};
use std::fmt::Write;

/// A row of the section with its configuration read back from its key.
struct Entry<'a> {
    osds: u32,
    scheme: Redundancy,
    workload: &'a str,
    row: &'a Row,
}

fn entries(sec: &SectionReport) -> Vec<Entry<'_>> {
    sec.rows
        .iter()
        .filter_map(|row| {
            let (osds, scheme, workload) = parse_key(&row.key)?;
            Some(Entry {
                osds,
                scheme,
                workload,
                row,
            })
        })
        .collect()
}

/// The workload keys of `entries` in order of first appearance.
fn workload_keys<'a>(entries: &[Entry<'a>]) -> Vec<&'a str> {
    let mut keys: Vec<&str> = Vec::new();
    for e in entries {
        if !keys.contains(&e.workload) {
            keys.push(e.workload);
        }
    }
    keys
}

fn workload_label(key: &str) -> &str {
    WORKLOADS
        .iter()
        .find(|w| w.key == key)
        .map_or(key, |w| w.label)
}

/// Sorted distinct values.
fn distinct<T: Ord>(values: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = values.collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The OSD count of the redundancy schemes: where a pool with more replicas than the sweep's
/// was measured.
fn scheme_osds(entries: &[Entry]) -> Option<u32> {
    entries.iter().find(|e| e.scheme != SWEEP).map(|e| e.osds)
}

/// The section's tables in Markdown: the sweep (figure and efficiency per OSD count), then
/// the redundancy schemes (figure per replica count at one OSD count).
pub fn render_tables(sec: &SectionReport) -> String {
    let entries = entries(sec);
    let keys = workload_keys(&entries);
    let find = |osds: u32, scheme: Redundancy, key: &str| {
        entries
            .iter()
            .find(|e| e.osds == osds && e.scheme == scheme && e.workload == key)
            .map(|e| e.row)
    };
    let mut s = String::new();
    let sweep = distinct(entries.iter().filter(|e| e.scheme == SWEEP).map(|e| e.osds));
    if !sweep.is_empty() {
        let _ = write!(s, "| OSDs ({SWEEP_REPLICAS} replica) |");
        for k in &keys {
            let _ = write!(s, " {} | Efficiency |", workload_label(k));
        }
        let _ = writeln!(s, "\n|---:|{}", "---:|---:|".repeat(keys.len()));
        for &n in &sweep {
            let _ = write!(s, "| {n} |");
            for k in &keys {
                match find(n, SWEEP, k) {
                    Some(row) => {
                        let eff = row
                            .percent_of_baseline()
                            .map_or_else(|| "-".to_string(), |p| format!("{p:.0}%"));
                        let _ = write!(s, " {} | {eff} |", cell(&row.basalt, &row.unit));
                    }
                    None => s.push_str(" - | - |"),
                }
            }
            s.push('\n');
        }
        s.push('\n');
    }
    if let Some(m) = scheme_osds(&entries) {
        let schemes = distinct(entries.iter().filter(|e| e.osds == m).map(|e| e.scheme));
        let _ = writeln!(s, "Redundancy schemes at {m} OSDs:\n");
        s.push_str("| Pool |");
        for k in &keys {
            let _ = write!(s, " {} |", workload_label(k));
        }
        let _ = writeln!(s, "\n|---|{}", "---:|".repeat(keys.len()));
        for &r in &schemes {
            let _ = write!(s, "| {} |", r.label());
            for k in &keys {
                let text =
                    find(m, r, k).map_or_else(|| "-".into(), |row| cell(&row.basalt, &row.unit));
                let _ = write!(s, " {text} |");
            }
            s.push('\n');
        }
        s.push('\n');
    }
    s
}

/// The section's paragraph of the Assessment: what the largest sweep step reached against
/// 1 OSD, and what each extra replica cost at the schemes' OSD count. `None` when nothing
/// comparable was measured.
pub fn assessment(sec: &SectionReport) -> Option<String> {
    let entries = entries(sec);
    let keys = workload_keys(&entries);
    let value = |osds: u32, scheme: Redundancy, key: &str| {
        let e = entries
            .iter()
            .find(|e| e.osds == osds && e.scheme == scheme && e.workload == key)?;
        Some((e.row.basalt.as_ref()?.value?, e.row.unit.as_str()))
    };
    let mut sentences = Vec::new();
    let mut sweep = Vec::new();
    for k in &keys {
        // The largest OSD count that has a figure, against the figure at 1 OSD.
        let top = entries
            .iter()
            .filter(|e| e.workload == *k && e.scheme == SWEEP && e.osds > 1)
            .filter(|e| e.row.basalt.as_ref().is_some_and(|f| f.value.is_some()))
            .map(|e| e.osds)
            .max();
        let (Some(n), Some((one, unit))) = (top, value(1, SWEEP, k)) else {
            continue;
        };
        let Some((at_n, _)) = value(n, SWEEP, k) else {
            continue;
        };
        let Some(eff) = efficiency(one, n, at_n) else {
            continue;
        };
        sweep.push(format!(
            "{} went from {} at 1 OSD to {} at {n} OSDs ({:.2}x, {:.0}% efficiency)",
            workload_label(k),
            format_value(one, unit),
            format_value(at_n, unit),
            eff * f64::from(n),
            eff * 100.0
        ));
    }
    if !sweep.is_empty() {
        sentences.push(format!(
            "With {SWEEP_REPLICAS} replica, {}.",
            sweep.join("; ")
        ));
    }
    if let Some(m) = scheme_osds(&entries) {
        let schemes = distinct(entries.iter().filter(|e| e.osds == m).map(|e| e.scheme));
        let mut costs = Vec::new();
        for k in &keys {
            // Every pool against the one with the fewest replicas that has a figure.
            let measured: Vec<(Redundancy, f64, &str)> = schemes
                .iter()
                .filter_map(|&r| value(m, r, k).map(|(v, u)| (r, v, u)))
                .collect();
            let Some(&(r0, v0, unit)) = measured.first() else {
                continue;
            };
            if v0 <= 0.0 {
                continue;
            }
            let others: Vec<String> = measured[1..]
                .iter()
                .map(|&(r, v, _)| {
                    let label = r.label();
                    let verb = if label.ends_with('s') {
                        "reach"
                    } else {
                        "reaches"
                    };
                    format!(
                        "{label} {verb} {:.0}% of it ({})",
                        v / v0 * 100.0,
                        format_value(v, unit)
                    )
                })
                .collect();
            if !others.is_empty() {
                costs.push(format!(
                    "{} with {} is {}, {}",
                    workload_label(k),
                    r0.label(),
                    format_value(v0, unit),
                    others.join(", ")
                ));
            }
        }
        if !costs.is_empty() {
            sentences.push(format!("At {m} OSDs: {}.", costs.join("; ")));
        }
    }
    (!sentences.is_empty()).then(|| format!("**{}.** {}", sec.title, sentences.join(" ")))
}

/// One workload's sweep for the scaling plot.
#[derive(Clone, Debug)]
pub struct Curve {
    /// The workload (`4k random read`).
    pub label: String,
    /// `(OSDs, figure)` of every sweep step that has a figure, ascending by OSDs.
    pub points: Vec<(u32, f64)>,
}

/// The sweep's curves, one per workload, in table order.
pub fn curves(sec: &SectionReport) -> Vec<Curve> {
    let entries = entries(sec);
    workload_keys(&entries)
        .into_iter()
        .map(|k| {
            let mut points: Vec<(u32, f64)> = entries
                .iter()
                .filter(|e| e.workload == k && e.scheme == SWEEP)
                .filter_map(|e| Some((e.osds, e.row.basalt.as_ref()?.value?)))
                .collect();
            points.sort_by_key(|p| p.0);
            Curve {
                label: workload_label(k).to_string(),
                points,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sections::scaling::tests::sample_section;

    #[test]
    fn renders_the_sweep_and_the_schemes() {
        // Goal: one line per OSD count with each figure and its efficiency, then one line per
        // replica count at the schemes' OSD count; failures read "failed".
        let md = render_tables(&sample_section());
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines[0],
            "| OSDs (1 replica) | 4k random read | Efficiency | 4k random write | Efficiency \
             | 128k sequential 70/30 | Efficiency |"
        );
        assert_eq!(lines[1], "|---:|---:|---:|---:|---:|---:|---:|");
        assert_eq!(
            lines[2],
            "| 1 | 10000 IOPS | 100% | 4000 IOPS | 100% | 300.00 MiB/s | 100% |"
        );
        assert_eq!(
            lines[3],
            "| 2 | 18000 IOPS | 90% | 6000 IOPS | 75% | 600.00 MiB/s | 100% |"
        );
        assert_eq!(
            lines[4],
            "| 3 | 24000 IOPS | 80% | failed | - | 450.00 MiB/s | 50% |"
        );
        assert!(md.contains("Redundancy schemes at 3 OSDs:"));
        assert!(md.contains("| EC 2+1 | 15000 IOPS | 500 IOPS | 350.00 MiB/s |"));
        assert!(md.contains(
            "| Pool | 4k random read | 4k random write | 128k sequential 70/30 |\n|---|---:|---:|---:|"
        ));
        assert!(md.contains("| 1 replica | 24000 IOPS | failed | 450.00 MiB/s |"));
        assert!(md.contains("| 2 replicas | 23000 IOPS | 3000 IOPS | 400.00 MiB/s |"));
        assert!(md.contains("| 3 replicas | 22000 IOPS | 2000 IOPS | 300.00 MiB/s |"));
    }

    #[test]
    fn assessment_states_speedup_and_replica_cost() {
        // Goal: the paragraph gives the largest measured step against 1 OSD, and each pool
        // against the one with the fewest replicas that has a figure.
        let text = assessment(&sample_section()).unwrap();
        assert!(text.starts_with("**Scaling over OSD counts (Simplyblock).** With 1 replica,"));
        assert!(text.contains(
            "4k random read went from 10000 IOPS at 1 OSD to 24000 IOPS at 3 OSDs (2.40x, 80% \
             efficiency)"
        ));
        // The 3-OSD write failed, so the 2-OSD step is the largest with a figure.
        assert!(text.contains("4k random write went from 4000 IOPS at 1 OSD to 6000 IOPS at 2 OSDs (1.50x, 75% efficiency)"), "{text}");
        assert!(text.contains(
            "4k random read with 1 replica is 24000 IOPS, 2 replicas reach 96% of it (23000 \
             IOPS), 3 replicas reach 92% of it (22000 IOPS)"
        ));
        assert!(
            text.contains(
                "4k random write with 2 replicas is 3000 IOPS, 3 replicas reach 67% of it (2000 \
             IOPS), EC 2+1 reaches 17% of it (500 IOPS)"
            ),
            "{text}"
        );
        let mut empty = sample_section();
        empty.rows.clear();
        assert!(assessment(&empty).is_none());
        assert!(render_tables(&empty).is_empty());
    }

    #[test]
    fn curves_follow_the_sweep() {
        // Goal: the plot gets each workload's measured sweep points in OSD order, without
        // the scheme pools or failed steps.
        let c = curves(&sample_section());
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].label, "4k random read");
        assert_eq!(c[0].points, vec![(1, 10000.0), (2, 18000.0), (3, 24000.0)]);
        assert_eq!(c[1].points, vec![(1, 4000.0), (2, 6000.0)]);
    }
}
