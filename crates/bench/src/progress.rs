//! Progress lines on stderr: `[3/17] 4k randread QD32 on basalt (ETA 2m10s)`.
//!
//! The ETA sums the planned seconds of the remaining steps, scaled by how far the finished
//! steps ran over or under their plan.

use std::time::Instant;

/// Counts steps and estimates the time left.
pub struct Progress {
    total: usize,
    done: usize,
    planned_total_s: f64,
    planned_done_s: f64,
    started: Instant,
    quiet: bool,
    /// Whether the interruption was announced.
    interrupted: bool,
}

impl Progress {
    /// A run of `total` steps planned to take `planned_total_s` seconds.
    pub fn new(total: usize, planned_total_s: f64, quiet: bool) -> Progress {
        Progress {
            total,
            done: 0,
            planned_total_s,
            planned_done_s: 0.0,
            started: Instant::now(),
            quiet,
            interrupted: false,
        }
    }

    /// Announce the next step, planned to take `planned_s` seconds, and count it.
    pub fn step(&mut self, label: &str, planned_s: f64) {
        let eta = self.eta_s();
        self.done += 1;
        if crate::interrupt::requested() {
            // The remaining steps are skipped at once: one line says so, not one each.
            if !std::mem::replace(&mut self.interrupted, true) {
                eprintln!("interrupted: skipping the remaining steps");
            }
        } else if !self.quiet {
            eprintln!(
                "[{}/{}] {label} (ETA {})",
                self.done,
                self.total.max(self.done),
                format_duration(eta)
            );
        }
        self.planned_done_s += planned_s;
    }

    /// Print a remark under the current step.
    pub fn note(&self, text: &str) {
        if !self.quiet {
            eprintln!("      {text}");
        }
    }

    /// Seconds left: the remaining plan, scaled by the observed speed of the finished steps.
    pub fn eta_s(&self) -> f64 {
        let remaining = (self.planned_total_s - self.planned_done_s).max(0.0);
        let elapsed = self.started.elapsed().as_secs_f64();
        // Scale only once a quarter of the plan is done; the first steps say little.
        let speed =
            if self.planned_done_s >= 0.25 * self.planned_total_s && self.planned_done_s > 0.0 {
                (elapsed / self.planned_done_s).clamp(0.5, 3.0)
            } else {
                1.0
            };
        remaining * speed
    }
}

/// `2m10s`, `45s`, `1h02m`.
pub fn format_duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_durations() {
        // Goal: ETAs read like `2m10s`.
        assert_eq!(format_duration(130.0), "2m10s");
        assert_eq!(format_duration(45.4), "45s");
        assert_eq!(format_duration(3720.0), "1h02m");
        assert_eq!(format_duration(-3.0), "0s");
    }

    #[test]
    fn eta_counts_down_with_the_plan() {
        // Goal: before any time has passed, the ETA is the plan that remains.
        let mut p = Progress::new(3, 30.0, true);
        assert!((p.eta_s() - 30.0).abs() < 0.5);
        p.step("a", 10.0);
        assert!(p.eta_s() <= 20.0 + 0.5);
    }
}
