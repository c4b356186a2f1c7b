//! `basalt volume iostat`: per-volume IOPS, throughput and latency from the per-volume
//! series of gateways' `/metrics` (`--metrics-per-volume`), as the difference of two scrapes.
//! Reads the Prometheus text format back with a small parser of the sample lines this
//! crate writes (name, optional labels, value).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

/// Largest `/metrics` answer read.
const SCRAPE_MAX_BYTES: u64 = 64 << 20;
/// Longest a scrape may take (connect, send, read).
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors of a scrape.
#[derive(Debug)]
pub struct ScrapeError(pub String);

impl std::fmt::Display for ScrapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScrapeError {}

/// One sample line: metric name, labels, value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The samples of a text exposition; comment lines and lines that do not parse are skipped.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return None,
    };
    let mut labels = Vec::new();
    let rest = if let Some(mut r) = rest.strip_prefix('{') {
        // Loop bound: every pass consumes one label of the finite line.
        loop {
            r = r.trim_start_matches(',');
            if let Some(after) = r.strip_prefix('}') {
                break after;
            }
            let (key, after) = r.split_once("=\"")?;
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next()? {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        c => value.push(c),
                    },
                    (_, c) => value.push(c),
                }
            };
            labels.push((key.to_string(), value));
            r = &after[end + 1..];
        }
    } else {
        rest
    };
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// `GET /metrics` on `addr` (IP:PORT), the body returned.
pub fn scrape(addr: &str) -> Result<String, ScrapeError> {
    let err =
        |what: &str, e: std::io::Error| ScrapeError(format!("{what} http://{addr}/metrics: {e}"));
    let sock: std::net::SocketAddr = addr
        .parse()
        .map_err(|_| ScrapeError(format!("{addr}: expected IP:PORT")))?;
    let mut s = std::net::TcpStream::connect_timeout(&sock, SCRAPE_TIMEOUT)
        .map_err(|e| err("connect to", e))?;
    s.set_read_timeout(Some(SCRAPE_TIMEOUT))
        .map_err(|e| err("set a timeout on", e))?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| err("send to", e))?;
    let mut answer = String::new();
    s.take(SCRAPE_MAX_BYTES)
        .read_to_string(&mut answer)
        .map_err(|e| err("read", e))?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| ScrapeError(format!("http://{addr}/metrics sent no HTTP answer")))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(ScrapeError(format!(
            "http://{addr}/metrics answered {status}"
        )));
    }
    Ok(body.to_string())
}

/// Cumulative counters of one volume (summed over frontends and endpoints).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct VolumeTotals {
    pub reads: f64,
    pub writes: f64,
    pub read_bytes: f64,
    pub write_bytes: f64,
    pub read_seconds: f64,
    pub write_seconds: f64,
}

/// Per-volume totals of `samples` (the `basalt_volume_*` series).
pub fn volume_totals(samples: &[Sample]) -> BTreeMap<String, VolumeTotals> {
    let mut out: BTreeMap<String, VolumeTotals> = BTreeMap::new();
    for s in samples {
        let (Some(volume), Some(op)) = (s.label("volume"), s.label("op")) else {
            continue;
        };
        let t = out.entry(volume.to_string()).or_default();
        let field = match (s.name.as_str(), op) {
            ("basalt_volume_requests_total", "read") => &mut t.reads,
            ("basalt_volume_requests_total", "write") => &mut t.writes,
            ("basalt_volume_bytes_total", "read") => &mut t.read_bytes,
            ("basalt_volume_bytes_total", "write") => &mut t.write_bytes,
            ("basalt_volume_request_seconds_sum", "read") => &mut t.read_seconds,
            ("basalt_volume_request_seconds_sum", "write") => &mut t.write_seconds,
            _ => continue,
        };
        *field += s.value;
    }
    out
}

/// One line of `volume iostat`: rates over an interval.
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeRates {
    pub volume: String,
    pub read_iops: f64,
    pub write_iops: f64,
    pub read_bytes_per_sec: f64,
    pub write_bytes_per_sec: f64,
    /// Mean latency over the interval (None: no request of the kind).
    pub read_latency: Option<Duration>,
    pub write_latency: Option<Duration>,
}

/// Rates of every volume between two scrapes `secs` apart, busiest first (a counter that
/// went back, after a restart, counts from zero).
pub fn rates(
    before: &BTreeMap<String, VolumeTotals>,
    after: &BTreeMap<String, VolumeTotals>,
    secs: f64,
) -> Vec<VolumeRates> {
    let secs = secs.max(1e-3);
    let mut out: Vec<VolumeRates> = after
        .iter()
        .map(|(volume, a)| {
            let b = before.get(volume).copied().unwrap_or_default();
            let d = |a: f64, b: f64| if a >= b { a - b } else { a };
            let (reads, writes) = (d(a.reads, b.reads), d(a.writes, b.writes));
            let mean = |s: f64, n: f64| (n > 0.0).then(|| Duration::from_secs_f64(s / n));
            VolumeRates {
                volume: volume.clone(),
                read_iops: reads / secs,
                write_iops: writes / secs,
                read_bytes_per_sec: d(a.read_bytes, b.read_bytes) / secs,
                write_bytes_per_sec: d(a.write_bytes, b.write_bytes) / secs,
                read_latency: mean(d(a.read_seconds, b.read_seconds), reads),
                write_latency: mean(d(a.write_seconds, b.write_seconds), writes),
            }
        })
        .collect();
    out.sort_by(|x, y| (y.read_iops + y.write_iops).total_cmp(&(x.read_iops + x.write_iops)));
    out
}

/// The table `volume iostat` prints, as `rbd perf image iostat` lays it out.
pub fn table(rows: &[VolumeRates]) -> String {
    let ms = |d: Option<Duration>| {
        d.map_or_else(
            || "-".to_string(),
            |d| format!("{:.2}", d.as_secs_f64() * 1e3),
        )
    };
    let mib = |b: f64| format!("{:.2}", b / (1 << 20) as f64);
    let mut out = format!(
        "{:<24} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
        "VOLUME", "WR/s", "RD/s", "WR MiB/s", "RD MiB/s", "WR_LAT ms", "RD_LAT ms"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<24} {:>10.0} {:>10.0} {:>10} {:>10} {:>10} {:>10}\n",
            r.volume,
            r.write_iops,
            r.read_iops,
            mib(r.write_bytes_per_sec),
            mib(r.read_bytes_per_sec),
            ms(r.write_latency),
            ms(r.read_latency)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_registry_renders() {
        // Goal: samples with and without labels (escaped quotes included) parse back; HELP,
        // TYPE and garbage lines are skipped.
        let text = "# HELP x y\nplain_total 3\nwith{a=\"1\",b=\"q\\\"x\"} 2.5\nbad line\n";
        let s = parse(text);
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!(s[0].name, "plain_total");
        assert_eq!(s[0].value, 3.0);
        assert_eq!(s[1].label("b"), Some("q\"x"));
        assert_eq!(s[1].value, 2.5);
    }

    #[test]
    fn rates_are_differences_over_the_interval() {
        // Goal: two scrapes 2 s apart give per-second rates and mean latencies; the busiest
        // volume comes first; an idle op has no latency.
        let scrape = |w: f64, secs: f64| {
            format!(
                "basalt_volume_requests_total{{frontend=\"nbd\",volume=\"a\",op=\"write\"}} {w}\n\
                 basalt_volume_bytes_total{{frontend=\"nbd\",volume=\"a\",op=\"write\"}} {}\n\
                 basalt_volume_request_seconds_sum{{frontend=\"nbd\",volume=\"a\",op=\"write\"}} {secs}\n\
                 basalt_volume_requests_total{{frontend=\"nbd\",volume=\"b\",op=\"read\"}} 1\n",
                w * 4096.0
            )
        };
        let before = volume_totals(&parse(&scrape(100.0, 1.0)));
        let after = volume_totals(&parse(&scrape(300.0, 1.2)));
        let r = rates(&before, &after, 2.0);
        assert_eq!(r[0].volume, "a");
        assert_eq!(r[0].write_iops, 100.0);
        assert_eq!(r[0].write_bytes_per_sec, 409600.0);
        let lat = r[0].write_latency.unwrap().as_secs_f64();
        assert!((lat - 0.001).abs() < 1e-9, "{lat}");
        assert_eq!(r[0].read_latency, None);
        assert_eq!(r[1].read_iops, 0.0);
        assert!(table(&r).contains("VOLUME"));
    }
}
