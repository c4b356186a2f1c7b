//! Progress of long operations (flatten, snapshot rm, scrub, image import, objvol build) on
//! stderr. On a terminal an `indicatif` bar with rate and ETA; elsewhere (tests, CI, pipes),
//! where indicatif draws nothing, plain lines: one at the first report, then at most one
//! per [`LINE_EVERY`], and one at the end.

use indicatif::{BinaryBytes, HumanCount, HumanDuration, ProgressBar, ProgressState};
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Shortest time between two progress lines when stderr is not a terminal.
pub const LINE_EVERY: Duration = Duration::from_secs(10);

/// What a meter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Things named by the word (`objects`, `PGs`), counted in plain numbers.
    Count(&'static str),
    /// Bytes, shown in binary units (KiB, MiB, GiB).
    Bytes,
}

impl Unit {
    /// `1.50 GiB` or `1,234 objects`.
    fn amount(self, n: u64) -> String {
        match self {
            Unit::Count(word) => format!("{} {word}", HumanCount(n)),
            Unit::Bytes => BinaryBytes(n).to_string(),
        }
    }

    /// `1.00 GiB of 4.00 GiB` or `120 of 400 objects`.
    fn amount_of(self, done: u64, total: u64) -> String {
        match self {
            Unit::Count(word) => format!("{} of {} {word}", HumanCount(done), HumanCount(total)),
            Unit::Bytes => format!("{} of {}", BinaryBytes(done), BinaryBytes(total)),
        }
    }

    /// `12.0 MiB/s` or `450 objects/s`.
    fn rate(self, per_s: f64) -> String {
        match self {
            Unit::Count(word) => format!("{per_s:.0} {word}/s"),
            Unit::Bytes => format!("{}/s", BinaryBytes(per_s.max(0.0) as u64)),
        }
    }
}

/// The text of one progress line: `flattening vm: 120 of 400 objects (30%), 45 objects/s,
/// ETA 6s`; with no total (still counting), `listing photos: 1,200 objects, 300 objects/s`;
/// at the end, `flattening vm: done, 400 objects in 9s (44 objects/s)`.
pub fn line(what: &str, unit: Unit, done: u64, total: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
    let mut s = format!("{what}: ");
    if total > 0 && done >= total {
        let _ = write!(
            s,
            "done, {} in {:#} ({})",
            unit.amount(done),
            HumanDuration(elapsed),
            unit.rate(rate)
        );
    } else if total > 0 {
        let _ = write!(
            s,
            "{} ({:.0}%), {}",
            unit.amount_of(done, total),
            done as f64 * 100.0 / total as f64,
            unit.rate(rate)
        );
        if rate > 0.0 {
            let eta = Duration::from_secs_f64((total - done) as f64 / rate);
            let _ = write!(s, ", ETA {:#}", HumanDuration(eta));
        }
    } else {
        let _ = write!(s, "{}, {}", unit.amount(done), unit.rate(rate));
    }
    s
}

/// When the next plain line is due.
struct Lines {
    started: Instant,
    last: Option<Instant>,
    finished: bool,
}

/// Progress of one operation: a bar on a terminal, bounded plain lines elsewhere.
pub struct Meter {
    what: String,
    unit: Unit,
    /// Whether stderr is a terminal: a bar, else plain lines.
    terminal: bool,
    /// The bar, made at the first report.
    bar: OnceLock<ProgressBar>,
    lines: Mutex<Lines>,
}

impl Meter {
    /// A meter of `what` (`flattening vm`), counting `unit`; nothing is shown before the
    /// first [`Meter::update`].
    pub fn new(what: &str, unit: Unit) -> Meter {
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        Meter::drawn(what, unit, terminal)
    }

    /// A meter drawing a bar (`terminal`) or plain lines.
    fn drawn(what: &str, unit: Unit, terminal: bool) -> Meter {
        Meter {
            what: what.to_string(),
            unit,
            terminal,
            bar: OnceLock::new(),
            lines: Mutex::new(Lines {
                started: Instant::now(),
                last: None,
                finished: false,
            }),
        }
    }

    /// `done` of `total` (0: not known yet) are done; done == total > 0 ends the meter.
    pub fn update(&self, done: u64, total: u64) {
        let end = total > 0 && done >= total;
        if self.terminal {
            let bar = self.bar.get_or_init(|| bar(&self.what, self.unit));
            if total > 0 && bar.length() != Some(total) {
                bar.set_length(total);
                bar.set_style(style(self.unit, true));
            }
            bar.set_position(done);
            if end {
                bar.finish_and_clear();
            }
            return;
        }
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let due = lines.last.is_none_or(|t| now - t >= LINE_EVERY);
        if lines.finished || !(due || end) {
            return;
        }
        lines.last = Some(now);
        lines.finished = end;
        eprintln!(
            "{}",
            line(&self.what, self.unit, done, total, now - lines.started)
        );
    }

    /// Stop showing the meter (a phase ended before its count did).
    pub fn finish(&self) {
        if let Some(bar) = self.bar.get() {
            bar.finish_and_clear();
        }
    }

    /// A callback for APIs that report `(done, total)`.
    pub fn reporter(self) -> impl Fn(u64, u64) + Send + Sync {
        move |done, total| self.update(done, total)
    }
}

impl Drop for Meter {
    /// An operation that ends (or fails) before its count does leaves no bar behind.
    fn drop(&mut self) {
        self.finish();
    }
}

/// The bar of `what`: a spinner while the total is unknown.
fn bar(what: &str, unit: Unit) -> ProgressBar {
    let bar = ProgressBar::no_length();
    bar.set_style(style(unit, false));
    bar.set_message(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// The bar's look: `{msg} [=====>   ] 1.2 GiB/4.0 GiB, 210 MiB/s, ETA 14s`.
fn style(unit: Unit, with_total: bool) -> indicatif::ProgressStyle {
    let amounts = match (unit, with_total) {
        (Unit::Bytes, true) => "{binary_bytes}/{binary_total_bytes}".to_string(),
        (Unit::Bytes, false) => "{binary_bytes}".to_string(),
        (Unit::Count(word), true) => format!("{{human_pos}}/{{human_len}} {word}"),
        (Unit::Count(word), false) => format!("{{human_pos}} {word}"),
    };
    let template = if with_total {
        format!("{{msg}} [{{bar:40}}] {amounts}, {{rate}}, ETA {{eta}}")
    } else {
        format!("{{spinner}} {{msg}}: {amounts}, {{rate}}")
    };
    indicatif::ProgressStyle::with_template(&template)
        .expect("the progress templates are fixed and valid")
        .progress_chars("=> ")
        .with_key(
            "rate",
            move |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&unit.rate(state.per_sec()));
            },
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_give_amounts_rate_and_eta_in_human_units() {
        // Goal: off a terminal a progress line says how far, how fast and how long is left,
        // in readable units, and the last one says it is done.
        let t = Duration::from_secs(10);
        assert_eq!(
            line("flattening vm", Unit::Count("objects"), 100, 400, t),
            "flattening vm: 100 of 400 objects (25%), 10 objects/s, ETA 30s"
        );
        assert_eq!(
            line("importing image \"a\"", Unit::Bytes, 1 << 30, 4 << 30, t),
            "importing image \"a\": 1.00 GiB of 4.00 GiB (25%), 102.40 MiB/s, ETA 30s"
        );
        assert_eq!(
            line("listing p", Unit::Count("objects"), 12_345, 0, t),
            "listing p: 12,345 objects, 1234 objects/s"
        );
        assert_eq!(
            line(
                "scrubbing",
                Unit::Count("PGs"),
                64,
                64,
                Duration::from_secs(120)
            ),
            "scrubbing: done, 64 PGs in 2m (1 PGs/s)"
        );
        // Nothing done yet: no rate, so no ETA (and no division by zero).
        assert_eq!(
            line("x", Unit::Bytes, 0, 100, Duration::ZERO),
            "x: 0 B of 100 B (0%), 0 B/s"
        );
    }

    #[test]
    fn plain_lines_are_bounded() {
        // Goal: off a terminal a meter prints its first report, then
        // nothing until LINE_EVERY passed, and its end once.
        let m = Meter::drawn("t", Unit::Count("objects"), false);
        m.update(1, 10);
        let first = m.lines.lock().unwrap().last;
        assert!(first.is_some());
        m.update(2, 10);
        assert_eq!(m.lines.lock().unwrap().last, first, "no second line yet");
        m.update(10, 10);
        let l = m.lines.lock().unwrap();
        assert!(l.finished && l.last != first, "the end gets its line");
        drop(l);
        let end = m.lines.lock().unwrap().last;
        m.update(10, 10);
        assert_eq!(m.lines.lock().unwrap().last, end, "one end line only");
    }
}
