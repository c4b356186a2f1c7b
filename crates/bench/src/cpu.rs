//! The CPU a cluster spends on a step: every daemon's CPU time is read before and after the
//! step, and the difference is charged to the bytes and IOs fio moved. A local `basalt up`
//! is read from /proc; the daemons of an existing cluster from the standard
//! `process_cpu_seconds_total` of their Prometheus `/metrics`.

use crate::procstat;
use crate::results::{CpuCost, DaemonCpu};
use anyhow::{bail, Context};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Longest wait to connect to a daemon's `/metrics`.
const SCRAPE_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for a daemon's `/metrics` answer.
const SCRAPE_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest `/metrics` answer read (a Basalt daemon sends a few KiB).
const SCRAPE_MAX_BYTES: u64 = 4 << 20;

/// Where one daemon's CPU time is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CpuSource {
    /// A process on this host, from /proc/PID/stat.
    Process {
        /// How the report names it (`basalt up`).
        name: String,
        /// Its process id.
        pid: u32,
    },
    /// A daemon's Prometheus endpoint: `process_cpu_seconds_total` and
    /// `process_resident_memory_bytes` at `http://ADDR/metrics`.
    Metrics {
        /// How the report names it (`osd.3`).
        name: String,
        /// `IP:PORT` of the endpoint.
        addr: String,
    },
}

impl CpuSource {
    /// The daemon's name in the report.
    pub fn name(&self) -> &str {
        match self {
            CpuSource::Process { name, .. } | CpuSource::Metrics { name, .. } => name,
        }
    }

    /// Read the daemon's CPU seconds and resident memory now.
    pub fn read(&self) -> anyhow::Result<DaemonCpu> {
        match self {
            CpuSource::Process { name, pid } => {
                let s = procstat::read(*pid)?;
                Ok(DaemonCpu {
                    name: name.clone(),
                    cpu_seconds: s.cpu_seconds,
                    resident_bytes: Some(s.resident_bytes),
                })
            }
            CpuSource::Metrics { name, addr } => {
                let text = scrape(addr)?;
                let Some(cpu_seconds) = metric_value(&text, "process_cpu_seconds_total") else {
                    bail!(
                        "http://{addr}/metrics has no process_cpu_seconds_total (a Basalt \
                         older than this benchmark?)"
                    );
                };
                Ok(DaemonCpu {
                    name: name.clone(),
                    cpu_seconds,
                    resident_bytes: metric_value(&text, "process_resident_memory_bytes")
                        .map(|b| b as u64),
                })
            }
        }
    }
}

/// Every source read at one moment (in parallel: each endpoint has its own timeout), in the
/// sources' order.
pub type Sample = Vec<Result<DaemonCpu, String>>;

/// Read every source now.
pub fn sample(sources: &[CpuSource]) -> Sample {
    std::thread::scope(|scope| {
        let readers: Vec<_> = sources
            .iter()
            .map(|s| scope.spawn(move || s.read().map_err(|e| format!("{}: {e:#}", s.name()))))
            .collect();
        readers
            .into_iter()
            .map(|r| {
                r.join()
                    .unwrap_or_else(|_| Err("CPU reader panicked".to_string()))
            })
            .collect()
    })
}

/// The CPU spent between two samples of the same sources, charged to `io_bytes` and
/// `total_ios`. A daemon read at only one of the two moments is listed as missing and not
/// counted; a counter that went backwards (the daemon restarted) counts as 0. `None` when no
/// daemon was read at both moments.
pub fn cost(
    before: &[Result<DaemonCpu, String>],
    after: &[Result<DaemonCpu, String>],
    io_bytes: u64,
    total_ios: u64,
) -> Option<CpuCost> {
    let mut daemons = Vec::new();
    let mut missing = Vec::new();
    for (b, a) in before.iter().zip(after) {
        match (b, a) {
            (Ok(b), Ok(a)) => daemons.push(DaemonCpu {
                name: a.name.clone(),
                cpu_seconds: (a.cpu_seconds - b.cpu_seconds).max(0.0),
                resident_bytes: a.resident_bytes,
            }),
            (Err(e), _) | (_, Err(e)) => missing.push(e.clone()),
        }
    }
    if daemons.is_empty() {
        return None;
    }
    let total = daemons.iter().map(|d| d.cpu_seconds).sum();
    Some(CpuCost {
        daemons,
        missing,
        ..CpuCost::new(total, io_bytes, total_ios)
    })
}

/// GET `http://addr/metrics` (bounded in time and size); returns the body.
pub fn scrape(addr: &str) -> anyhow::Result<String> {
    let sock = addr
        .to_socket_addrs()
        .with_context(|| format!("resolve {addr}"))?
        .next()
        .with_context(|| format!("{addr} resolves to no address"))?;
    let mut stream = TcpStream::connect_timeout(&sock, SCRAPE_CONNECT_TIMEOUT)
        .with_context(|| format!("connect to http://{addr}/metrics"))?;
    stream.set_read_timeout(Some(SCRAPE_READ_TIMEOUT))?;
    stream.set_write_timeout(Some(SCRAPE_READ_TIMEOUT))?;
    // One write: the whole request in one segment.
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .with_context(|| format!("send a request to http://{addr}/metrics"))?;
    let mut answer = String::new();
    stream
        .take(SCRAPE_MAX_BYTES)
        .read_to_string(&mut answer)
        .with_context(|| format!("read http://{addr}/metrics"))?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .with_context(|| format!("http://{addr}/metrics sent no HTTP answer"))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("http://{addr}/metrics answered {status}");
    }
    Ok(body.to_string())
}

/// The value of the first sample of metric `name` in Prometheus text (labels, if any, are
/// skipped).
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let rest = match rest.strip_prefix('{') {
            Some(labels) => &labels[labels.find('}')? + 1..],
            None if rest.starts_with([' ', '\t']) => rest,
            None => return None,
        };
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_metric_values_from_prometheus_text() {
        // Goal: a sample is found by its exact name, with or without labels, never by a
        // longer name that starts the same; HELP/TYPE lines are not samples.
        let text = "# HELP process_cpu_seconds_total Total.\n\
                    # TYPE process_cpu_seconds_total counter\n\
                    process_cpu_seconds_total_extra 9\n\
                    process_cpu_seconds_total 12.5\n\
                    basalt_osd_pgs{osd=\"1\",phase=\"active\"} 32\n\
                    process_resident_memory_bytes 1.5e+07\n";
        assert_eq!(metric_value(text, "process_cpu_seconds_total"), Some(12.5));
        assert_eq!(metric_value(text, "basalt_osd_pgs"), Some(32.0));
        assert_eq!(
            metric_value(text, "process_resident_memory_bytes"),
            Some(1.5e7)
        );
        assert_eq!(metric_value(text, "process_start_time_seconds"), None);
    }

    #[test]
    fn cost_sums_daemons_read_at_both_moments() {
        // Goal: the step's CPU is the sum over daemons of after - before; a daemon missing at
        // either moment is listed, not counted; a restart (counter went back) counts 0.
        let d = |name: &str, s: f64| {
            Ok(DaemonCpu {
                name: name.into(),
                cpu_seconds: s,
                resident_bytes: Some(1),
            })
        };
        let before: Sample = vec![
            d("osd.0", 10.0),
            d("osd.1", 5.0),
            Err("osd.2: connection refused".into()),
            d("osd.3", 50.0),
        ];
        let after: Sample = vec![
            d("osd.0", 12.0),
            d("osd.1", 6.5),
            d("osd.2", 3.0),
            d("osd.3", 1.0),
        ];
        let c = cost(&before, &after, 1 << 30, 2000).unwrap();
        assert!((c.cpu_seconds - 3.5).abs() < 1e-9);
        assert_eq!(c.per_gib, Some(3.5));
        assert_eq!(c.per_1000_ios, Some(1.75));
        assert_eq!(c.daemons.len(), 3);
        assert_eq!(c.daemons[2].cpu_seconds, 0.0);
        assert_eq!(c.missing, vec!["osd.2: connection refused".to_string()]);
        let none: Sample = vec![Err("x".into())];
        assert!(cost(&none, &none, 1, 1).is_none());
    }

    #[test]
    fn scrapes_a_metrics_endpoint() {
        // Goal: a daemon's /metrics is read over HTTP; a non-200 answer and a missing
        // process_cpu_seconds_total are errors that name the endpoint.
        let serve = |answer: &'static str| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap().to_string();
            std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                // Read the whole request first: closing on unread bytes resets the
                // connection before the client reads the answer.
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                s.write_all(answer.as_bytes()).unwrap();
            });
            addr
        };
        let ok = serve(
            "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nprocess_cpu_seconds_total 4.25\n\
             process_resident_memory_bytes 8192\n",
        );
        let source = CpuSource::Metrics {
            name: "osd.7".into(),
            addr: ok,
        };
        let r = source.read().unwrap();
        assert_eq!((r.cpu_seconds, r.resident_bytes), (4.25, Some(8192)));
        let missing = serve("HTTP/1.1 200 OK\r\n\r\nbasalt_osd_reads_total 1\n");
        let e = CpuSource::Metrics {
            name: "osd.8".into(),
            addr: missing.clone(),
        }
        .read()
        .unwrap_err();
        assert!(
            format!("{e:#}").contains(&format!(
                "http://{missing}/metrics has no process_cpu_seconds_total"
            )),
            "{e:#}"
        );
        let not_found = serve("HTTP/1.1 404 Not Found\r\n\r\ntry /metrics\n");
        let e = scrape(&not_found).unwrap_err().to_string();
        assert!(
            e.contains(&format!("http://{not_found}/metrics answered HTTP/1.1 404")),
            "{e}"
        );
        let local = CpuSource::Process {
            name: "me".into(),
            pid: std::process::id(),
        };
        let own = sample(&[local]);
        assert!(
            matches!(&own[..], [Ok(d)] if d.name == "me" && d.resident_bytes.is_some_and(|b| b > 0)),
            "{own:?}"
        );
    }
}
