//! What the simulator sees of the OSDs from outside: their invariant trace events (see
//! `basalt_osd::INVARIANT_EVENTS`) and a tail of their log, each with its virtual time.

use basalt_proto::OsdId;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Log lines kept for a failure report.
const LOG_TAIL_LINES: usize = 400;

#[derive(Default)]
struct Seen {
    /// (pg, interval) → OSDs that acknowledged client writes as its primary.
    acknowledged_by: BTreeMap<(String, u64), BTreeSet<OsdId>>,
    /// (pg, interval) → OSDs that activated it.
    activated_by: BTreeMap<(String, u64), BTreeSet<OsdId>>,
    log: VecDeque<String>,
    /// Print every log line as it happens.
    echo: bool,
}

/// Collects events of the current thread's simulation (install with
/// `tracing::subscriber::with_default`).
#[derive(Clone)]
pub struct Observer {
    seen: Arc<Mutex<Seen>>,
    started: Option<tokio::time::Instant>,
    /// Log lines kept (and printed, when echoing) from this level up.
    level: Level,
}

impl Observer {
    /// An observer keeping log lines from `level` up; `echo` also prints them.
    pub fn new(level: Level, echo: bool) -> Observer {
        let o = Observer {
            seen: Arc::default(),
            started: None,
            level,
        };
        o.seen.lock().expect("observer lock").echo = echo;
        o
    }

    /// Count virtual time from `start`.
    pub fn with_start(mut self, start: tokio::time::Instant) -> Observer {
        self.started = Some(start);
        self
    }

    /// Add a line of the simulator's own to the log.
    pub fn note(&self, line: String) {
        self.push(line);
    }

    fn push(&self, line: String) {
        let ms = self
            .started
            .map(|s| s.elapsed().as_millis())
            .unwrap_or_default();
        let line = format!("{:>7}.{:03}s {line}", ms / 1000, ms % 1000);
        let mut seen = self.seen.lock().expect("observer lock");
        if seen.echo {
            eprintln!("{line}");
        }
        if seen.log.len() == LOG_TAIL_LINES {
            seen.log.pop_front();
        }
        seen.log.push_back(line);
    }

    /// The last log lines.
    pub fn log_tail(&self) -> Vec<String> {
        self.seen
            .lock()
            .expect("observer lock")
            .log
            .iter()
            .cloned()
            .collect()
    }

    /// Violations of "one primary per PG and interval".
    pub fn violations(&self) -> Vec<String> {
        let seen = self.seen.lock().expect("observer lock");
        let mut out = Vec::new();
        for (what, by) in [
            ("acknowledged writes", &seen.acknowledged_by),
            ("activated", &seen.activated_by),
        ] {
            for ((pg, interval), osds) in by {
                if osds.len() > 1 {
                    out.push(format!(
                        "pg {pg} interval {interval}: {} OSDs {what} as its primary: {osds:?}",
                        osds.len()
                    ));
                }
            }
        }
        out
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    osd: Option<u64>,
    pg: Option<String>,
    interval: Option<u64>,
    rest: String,
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "osd" => self.osd = Some(value),
            "interval" => self.interval = Some(value),
            name => {
                let _ = write!(self.rest, " {name}={value}");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "pg" => self.pg = Some(format!("{value:?}")),
            "osd" => self.rest.insert_str(0, &format!(" osd={value:?}")),
            name => {
                let _ = write!(self.rest, " {name}={value:?}");
            }
        }
    }
}

impl Subscriber for Observer {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == basalt_osd::INVARIANT_EVENTS || *metadata.level() <= self.level
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let meta = event.metadata();
        if meta.target() == basalt_osd::INVARIANT_EVENTS {
            let (Some(osd), Some(pg), Some(interval)) = (f.osd, f.pg.clone(), f.interval) else {
                return;
            };
            let mut seen = self.seen.lock().expect("observer lock");
            let by = match f.message.as_str() {
                "acknowledged" => &mut seen.acknowledged_by,
                _ => &mut seen.activated_by,
            };
            by.entry((pg, interval)).or_default().insert(osd as OsdId);
            return;
        }
        let osd = f.osd.map(|o| format!(" osd.{o}")).unwrap_or_default();
        let pg = f.pg.map(|p| format!(" pg={p}")).unwrap_or_default();
        let interval = f
            .interval
            .map(|i| format!(" interval={i}"))
            .unwrap_or_default();
        self.push(format!(
            "{:5} {}{osd}{pg}{interval}{}: {}",
            meta.level(),
            meta.target(),
            f.rest,
            f.message
        ));
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}
