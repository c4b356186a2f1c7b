//! `basalt bench compare A.json B.json`: the change of every figure from run A to run B.

use crate::results::Results;
use anyhow::Context;
use std::fmt::Write;
use std::path::Path;

/// Read a `results.json`.
pub fn load(path: &Path) -> anyhow::Result<Results> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))
}

/// Compare two `results.json` files and return the table.
pub fn compare_files(a: &Path, b: &Path) -> anyhow::Result<String> {
    Ok(compare(&load(a)?, &load(b)?))
}

/// A Markdown table with every figure of A and B, the change in percent, and whether the
/// change is better or worse for that figure.
pub fn compare(a: &Results, b: &Results) -> String {
    let fa = a.flatten();
    let fb = b.flatten();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "A: {} ({})\nB: {} ({})\n",
        a.generated_utc, a.command, b.generated_utc, b.command
    );
    let _ = writeln!(
        s,
        "| Figure | Unit | A | B | Change | |\n|---|---|---:|---:|---:|---|"
    );
    let fmt = |v: Option<f64>| match v {
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.4}"),
        None => "failed".into(),
    };
    for (key, unit, higher_is_better, va) in &fa {
        let vb = fb.iter().find(|f| &f.0 == key).map(|f| f.3);
        let Some(vb) = vb else {
            let _ = writeln!(s, "| {key} | {unit} | {} | - | - | only in A |", fmt(*va));
            continue;
        };
        let (change, verdict) = match (va, vb) {
            (Some(x), Some(y)) if *x != 0.0 => {
                let pct = (y - x) / x.abs() * 100.0;
                let better = if *higher_is_better {
                    pct > 0.0
                } else {
                    pct < 0.0
                };
                let verdict = if pct.abs() < 0.5 {
                    "same"
                } else if better {
                    "better"
                } else {
                    "worse"
                };
                (format!("{pct:+.1}%"), verdict)
            }
            _ => ("-".into(), ""),
        };
        let _ = writeln!(
            s,
            "| {key} | {unit} | {} | {} | {change} | {verdict} |",
            fmt(*va),
            fmt(vb)
        );
    }
    for (key, unit, _, vb) in &fb {
        if !fa.iter().any(|f| &f.0 == key) {
            let _ = writeln!(s, "| {key} | {unit} | - | {} | - | only in B |", fmt(*vb));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample;

    #[test]
    fn reports_change_per_figure() {
        // Goal: each figure shows A, B, the change, and whether it improved for its kind
        // (more IOPS is better, more latency is worse); figures in one run only are named.
        let a = sample();
        let mut b = sample();
        let disk = &mut b.sections[1];
        disk.rows[0].basalt.as_mut().unwrap().value = Some(600.0); // 500 -> 600 MiB/s
        disk.rows[2].basalt.as_mut().unwrap().value = Some(150.0); // 100 -> 150 us
        disk.rows.remove(1);
        let t = compare(&a, &b);
        assert!(
            t.contains("| disk/seqread_1m_mib_s/basalt | MiB/s | 500 | 600 | +20.0% | better |"),
            "{t}"
        );
        assert!(t.contains("| disk/t1q1_read_lat_us/basalt | us | 100 | 150 | +50.0% | worse |"));
        assert!(
            t.contains("| disk/seqread_1m_mib_s/baseline | MiB/s | 1000 | 1000 | +0.0% | same |")
        );
        assert!(
            t.contains("| disk/randread_4k_qd1_iops/basalt | IOPS | 12000 | - | - | only in A |")
        );
        assert!(t.contains("| disk/randwrite_iops/basalt | IOPS | failed | failed | - |"));
        assert!(t.contains("basalt_cpu_s_per_gib"));
    }

    #[test]
    fn results_round_trip_through_json() {
        // Goal: what `results.json` holds is what `compare` reads back.
        let dir = std::env::temp_dir().join(format!("basalt-bench-cmp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("results.json");
        std::fs::write(&path, serde_json::to_string(&sample()).unwrap()).unwrap();
        let t = compare_files(&path, &path).unwrap();
        assert!(t.contains("| disk/seqread_1m_mib_s/basalt | MiB/s | 500 | 500 | +0.0% | same |"));
        assert!(compare_files(&dir.join("missing.json"), &path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
