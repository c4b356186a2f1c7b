//! Progress of a benchmark run on stderr: `[3/17] 4k randread QD32 on basalt (ETA 2m10s)`
//! a line per step, always (they are the run's log); on a terminal also an `indicatif` bar
//! under them with the elapsed time and an ETA that counts down within a step.
//!
//! The ETA sums the planned seconds of the remaining steps, scaled by how far the finished
//! steps ran over or under their plan.

use indicatif::{ProgressBar, ProgressState, ProgressStyle};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// The bar, drawn from the first step on when stderr is a terminal.
    bar: Option<ProgressBar>,
    /// What the bar's ETA counts down from, shared with its style.
    live: Arc<Mutex<LiveEta>>,
}

/// The ETA of the current step: the estimate when it began, counting down as it runs, but
/// never below the estimate once it is done.
#[derive(Clone, Copy, Debug)]
struct LiveEta {
    step_started: Instant,
    at_start_s: f64,
    after_step_s: f64,
}

impl LiveEta {
    fn seconds(&self) -> f64 {
        (self.at_start_s - self.step_started.elapsed().as_secs_f64()).max(self.after_step_s)
    }
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
            bar: None,
            live: Arc::new(Mutex::new(LiveEta {
                step_started: Instant::now(),
                at_start_s: planned_total_s,
                after_step_s: planned_total_s,
            })),
        }
    }

    /// Announce the next step, planned to take `planned_s` seconds, and count it.
    pub fn step(&mut self, label: &str, planned_s: f64) {
        let eta = self.eta_s();
        self.done += 1;
        self.planned_done_s += planned_s;
        if crate::interrupt::requested() {
            // The remaining steps are skipped at once: one line says so, not one each.
            if !std::mem::replace(&mut self.interrupted, true) {
                self.println("interrupted: skipping the remaining steps");
            }
            return;
        }
        if self.quiet {
            return;
        }
        let total = self.total.max(self.done);
        self.println(&step_line(self.done, total, label, eta));
        *self.live.lock().unwrap_or_else(|e| e.into_inner()) = LiveEta {
            step_started: Instant::now(),
            at_start_s: eta,
            after_step_s: self.eta_s(),
        };
        if self.bar.is_none() && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            self.bar = Some(bar(self.live.clone()));
        }
        if let Some(bar) = &self.bar {
            bar.set_length(total as u64);
            bar.set_position(self.done as u64);
            bar.set_message(label.to_string());
        }
    }

    /// Print a remark under the current step.
    pub fn note(&self, text: &str) {
        if !self.quiet {
            self.println(&format!("      {text}"));
        }
    }

    /// A line on stderr, above the bar when there is one.
    fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
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

impl Drop for Progress {
    /// The bar goes; the step lines above it stay.
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// `[3/17] 4k randread QD32 on basalt (ETA 2m10s)`.
fn step_line(done: usize, total: usize, label: &str, eta_s: f64) -> String {
    format!("[{done}/{total}] {label} (ETA {})", format_duration(eta_s))
}

/// The terminal bar: `[3/17] [=====>     ] 4m12s elapsed, ETA 2m10s  4k randread ...`.
fn bar(live: Arc<Mutex<LiveEta>>) -> ProgressBar {
    let style = ProgressStyle::with_template(
        "[{pos}/{len}] [{bar:30}] {elapsed_precise} elapsed, ETA {plan_eta}  {wide_msg}",
    )
    .expect("the progress template is fixed and valid")
    .progress_chars("=> ")
    .with_key(
        "plan_eta",
        move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
            let eta = live.lock().unwrap_or_else(|e| e.into_inner()).seconds();
            let _ = w.write_str(&format_duration(eta));
        },
    );
    let bar = ProgressBar::new(0).with_style(style);
    // Steps last minutes: a steady tick keeps the elapsed time and the ETA moving.
    bar.enable_steady_tick(Duration::from_secs(1));
    bar
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
    fn step_lines_and_the_live_eta() {
        // Goal: the step line keeps its format (scripts and logs read it); within a step
        // the bar's ETA counts down from the step's estimate but not below what is left
        // after it.
        assert_eq!(
            step_line(3, 17, "4k randread QD32 on basalt", 130.0),
            "[3/17] 4k randread QD32 on basalt (ETA 2m10s)"
        );
        let live = LiveEta {
            step_started: Instant::now() - Duration::from_secs(40),
            at_start_s: 100.0,
            after_step_s: 70.0,
        };
        assert!((live.seconds() - 70.0).abs() < 0.5, "{}", live.seconds());
        let live = LiveEta {
            step_started: Instant::now() - Duration::from_secs(10),
            ..live
        };
        assert!((live.seconds() - 90.0).abs() < 0.5, "{}", live.seconds());
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
