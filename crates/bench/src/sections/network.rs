//! Network baseline. For a local cluster: loopback TCP (its replicas talk over 127.0.0.1),
//! with iperf3 when installed, otherwise a built-in TCP stream test. For an existing cluster:
//! from each storage host to this host, with iperf3 where an iperf3 server answers on the
//! host, otherwise the cluster's built-in stream test ([`ExistingCluster::stream_from`]).

use super::{Ctx, Section};
use crate::environment;
use crate::results::{Figure, Row, SectionLayout, SectionReport, SectionStatus, StorageHost};
use crate::under_test::ExistingCluster;
use anyhow::{bail, Context};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Attempts to reach a freshly started iperf3 server (bounded start-up wait).
const IPERF3_CONNECT_ATTEMPTS: u32 = 25;
/// Pause between those attempts.
const IPERF3_RETRY_PAUSE: Duration = Duration::from_millis(200);
/// Extra time an iperf3 client may take beyond its test time.
const IPERF3_SLACK: Duration = Duration::from_secs(30);
/// Port an iperf3 server listens on by default (`iperf3 -s`).
pub const IPERF3_PORT: u16 = 5201;
/// How long the iperf3 client waits for a storage host's server to answer, milliseconds.
const IPERF3_REMOTE_CONNECT_MS: u32 = 1000;
/// How long the built-in receiver waits for data before giving up.
const BUILTIN_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Write size of the built-in stream test.
const BUILTIN_CHUNK_BYTES: usize = 1 << 20;

/// The network baseline section.
pub enum NetworkSection<'a> {
    /// Loopback TCP on this host, the path a local cluster's replication takes.
    Loopback,
    /// From each storage host of an existing cluster to this host.
    Hosts {
        /// The hosts, in report order.
        hosts: Vec<StorageHost>,
        /// The cluster, for the built-in test where no iperf3 server answers.
        cluster: &'a dyn ExistingCluster,
    },
}

/// What a network test measured.
struct NetResult {
    mib_s: f64,
    retransmits: Option<u64>,
    command: String,
    raw: Option<String>,
}

impl Section for NetworkSection<'_> {
    fn id(&self) -> &'static str {
        "network"
    }

    fn plan(&self, ctx: &Ctx) -> Vec<f64> {
        let per_test = f64::from(ctx.settings.runtime_s) + 1.0;
        match self {
            NetworkSection::Loopback => vec![per_test],
            NetworkSection::Hosts { hosts, .. } => vec![per_test; hosts.len()],
        }
    }

    fn run(&self, ctx: &mut Ctx) -> SectionReport {
        match self {
            NetworkSection::Loopback => loopback(ctx),
            NetworkSection::Hosts { hosts, cluster } => from_hosts(ctx, hosts, *cluster),
        }
    }
}

/// The throughput and retransmit figures of a test's outcome.
fn figures(outcome: anyhow::Result<NetResult>, ctx: &Ctx) -> (Figure, Figure) {
    match outcome {
        Ok(r) => {
            let f = |v: Option<f64>| Figure {
                value: v,
                command: Some(r.command.clone()),
                raw: r.raw.clone(),
                error: v.is_none().then(|| "not reported".to_string()),
                ..Figure::default()
            };
            (f(Some(r.mib_s)), f(r.retransmits.map(|n| n as f64)))
        }
        Err(e) => {
            let msg = format!("{e:#}");
            ctx.progress.note(&format!("failed: {msg}"));
            let f = Figure::failed(msg, None, None);
            (f.clone(), f)
        }
    }
}

fn row(key: String, label: String, unit: &str, higher_is_better: bool, f: Figure) -> Row {
    Row {
        key,
        label,
        unit: unit.into(),
        higher_is_better,
        baseline: Some(f),
        basalt: None,
    }
}

fn loopback(ctx: &mut Ctx) -> SectionReport {
    let seconds = ctx.settings.runtime_s.max(1);
    let iperf3 = environment::which("iperf3").is_some();
    let mut notes = Vec::new();
    let label = if iperf3 {
        "TCP stream over loopback with iperf3"
    } else {
        notes.push(
            "iperf3 is not installed (install it with `apt-get install -y fio iperf3`); \
             the built-in TCP stream test ran instead, and its retransmit count is the \
             whole machine's (`RetransSegs` in /proc/net/snmp) during the test."
                .to_string(),
        );
        ctx.progress
            .note("iperf3 not found (apt-get install -y fio iperf3): built-in TCP test");
        "TCP stream over loopback (built-in test)"
    };
    ctx.progress
        .step(label, f64::from(ctx.settings.runtime_s) + 1.0);
    let outcome = if iperf3 {
        iperf3_loopback(ctx, seconds)
    } else {
        builtin_loopback(seconds)
    };
    let (throughput, retrans) = figures(outcome, ctx);
    ctx.network_mib_s = throughput.value;
    SectionReport {
        id: "network".into(),
        title: "Network baseline".into(),
        intro: format!(
            "Loopback TCP on this host ({label}, {seconds} s), the path the local \
             cluster's replication takes."
        ),
        baseline_name: "Loopback TCP".into(),
        status: SectionStatus::Measured,
        layout: SectionLayout::Comparison,
        notes,
        rows: vec![
            row(
                "tcp_throughput".into(),
                "TCP throughput".into(),
                "MiB/s",
                true,
                throughput,
            ),
            row(
                "tcp_retransmits".into(),
                "TCP retransmits".into(),
                "retransmits",
                false,
                retrans,
            ),
        ],
    }
}

/// A key fragment for a host address (`10_0_0_2`).
pub fn host_key(ip: &str) -> String {
    ip.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn from_hosts(
    ctx: &mut Ctx,
    hosts: &[StorageHost],
    cluster: &dyn ExistingCluster,
) -> SectionReport {
    let seconds = ctx.settings.runtime_s.max(1);
    let per_test = f64::from(ctx.settings.runtime_s) + 1.0;
    let iperf3 = environment::which("iperf3").is_some();
    let mut notes = Vec::new();
    if !iperf3 {
        notes.push(
            "iperf3 is not installed on this host (`apt-get install -y iperf3`): every host \
             was measured with the built-in stream test."
                .to_string(),
        );
    }
    let mut rows = Vec::new();
    // (why iperf3 failed, the hosts it failed at), so one note covers hosts alike.
    let mut no_server: Vec<(String, Vec<String>)> = Vec::new();
    for host in hosts {
        let label = host.label();
        let key = host_key(&host.ip);
        ctx.progress
            .step(&format!("network from {label}"), per_test);
        if crate::interrupt::requested() {
            let f = Figure::failed(crate::interrupt::MESSAGE, None, None);
            rows.push(row(
                format!("tcp_throughput_{key}"),
                format!("TCP from {label}"),
                "MiB/s",
                true,
                f,
            ));
            continue;
        }
        if iperf3 {
            let raw = format!("network-iperf3-{key}.json");
            let timeout_ms = IPERF3_REMOTE_CONNECT_MS.to_string();
            let extra = ["-R", "--connect-timeout", timeout_ms.as_str()];
            match iperf3_client(ctx, &host.ip, IPERF3_PORT, seconds, &extra, &raw, 1) {
                Ok(r) => {
                    let retransmits = r.retransmits;
                    let (throughput, retrans) = figures(Ok(r), ctx);
                    rows.push(row(
                        format!("tcp_throughput_{key}"),
                        format!("TCP from {label}"),
                        "MiB/s",
                        true,
                        throughput,
                    ));
                    if retransmits.is_some() {
                        rows.push(row(
                            format!("tcp_retransmits_{key}"),
                            format!("TCP retransmits from {label}"),
                            "retransmits",
                            false,
                            retrans,
                        ));
                    }
                    continue;
                }
                Err(e) => {
                    let why = format!("{e:#}");
                    ctx.progress
                        .note(&format!("{label}: no iperf3 server ({why}): built-in test"));
                    match no_server.iter_mut().find(|(w, _)| *w == why) {
                        Some((_, at)) => at.push(label.clone()),
                        None => no_server.push((why, vec![label.clone()])),
                    }
                }
            }
        }
        let figure = match cluster.stream_from(&host.ip, seconds) {
            Ok(r) => Figure {
                value: Some(r.mib_s),
                command: Some(r.method),
                ..Figure::default()
            },
            Err(e) => {
                let msg = format!("{e:#}");
                ctx.progress.note(&format!("failed: {msg}"));
                Figure::failed(msg, None, None)
            }
        };
        rows.push(row(
            format!("stream_throughput_{key}"),
            format!("Built-in stream from {label}"),
            "MiB/s",
            true,
            figure,
        ));
    }
    for (why, at) in no_server {
        notes.push(format!(
            "No iperf3 server answered on port {IPERF3_PORT} at {} ({why}): the built-in \
             stream test ran there instead. Start `iperf3 -s` on a storage host to measure it \
             with iperf3.",
            at.join(", ")
        ));
    }
    SectionReport {
        id: "network".into(),
        title: "Network baseline".into(),
        intro: format!(
            "From each storage host (the distinct addresses of the OSDs that are up in the \
             cluster map) to this host, the direction reads take, {seconds} s each: iperf3 in \
             reverse mode (`-R`, the host sends) where an iperf3 server answers on port \
             {IPERF3_PORT} of the host, otherwise the built-in stream test: reads of \
             never-written objects whose primary OSD is on that host, which the OSD answers \
             with zeros from memory without touching its disk. The built-in test carries \
             Basalt's framing and one OSD's request handling, so it is a lower bound of what \
             TCP alone would carry."
        ),
        baseline_name: "Network".into(),
        status: SectionStatus::Measured,
        layout: SectionLayout::Comparison,
        notes,
        rows,
    }
}

/// Kills the iperf3 server however the test ends.
struct ServerGuard(Child);

impl Drop for ServerGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn iperf3_loopback(ctx: &Ctx, seconds: u32) -> anyhow::Result<NetResult> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let _server = ServerGuard(
        Command::new("iperf3")
            .args(["-s", "-B", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start iperf3 server")?,
    );
    iperf3_client(
        ctx,
        "127.0.0.1",
        port,
        seconds,
        &[],
        "network-iperf3.json",
        IPERF3_CONNECT_ATTEMPTS,
    )
}

/// Run `iperf3 -c host -p port -t seconds -J` with `extra` options and keep its JSON as
/// `raw/{raw_name}`. A server that answers with an error (it may not listen yet) is tried
/// again, `attempts` times in all.
fn iperf3_client(
    ctx: &Ctx,
    host: &str,
    port: u16,
    seconds: u32,
    extra: &[&str],
    raw_name: &str,
    attempts: u32,
) -> anyhow::Result<NetResult> {
    let args: Vec<String> = ["-c", host, "-p", &port.to_string()]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .chain(["-t".into(), seconds.to_string(), "-J".into()])
        .collect();
    let command = format!("iperf3 {}", args.join(" "));
    let raw_path = ctx.raw_dir.join(raw_name);
    let timeout = Duration::from_secs(u64::from(seconds)) + IPERF3_SLACK;
    let mut last_err = String::new();
    for attempt in 0..attempts {
        if attempt > 0 {
            std::thread::sleep(IPERF3_RETRY_PAUSE);
        }
        let out = run_bounded(Command::new("iperf3").args(&args), timeout)?;
        std::fs::write(&raw_path, &out).with_context(|| format!("write {}", raw_path.display()))?;
        let json: serde_json::Value =
            serde_json::from_slice(&out).context("parse iperf3 JSON output")?;
        if let Some(e) = json.get("error").and_then(|e| e.as_str()) {
            last_err = e.to_string();
            continue;
        }
        let (mib_s, retransmits) = parse_iperf3(&json)?;
        return Ok(NetResult {
            mib_s,
            retransmits,
            command,
            raw: Some(format!("raw/{raw_name}")),
        });
    }
    bail!("iperf3: {last_err}")
}

/// Throughput (received, MiB/s) and retransmits from `iperf3 -J` output.
pub fn parse_iperf3(json: &serde_json::Value) -> anyhow::Result<(f64, Option<u64>)> {
    let end = json.get("end").context("iperf3 JSON has no `end`")?;
    let bps = end["sum_received"]["bits_per_second"]
        .as_f64()
        .or_else(|| end["sum_sent"]["bits_per_second"].as_f64())
        .context("iperf3 JSON has no throughput")?;
    Ok((
        bps / 8.0 / (1u64 << 20) as f64,
        end["sum_sent"]["retransmits"].as_u64(),
    ))
}

/// Run a command to completion within `timeout`, returning its stdout.
pub(crate) fn run_bounded(cmd: &mut Command, timeout: Duration) -> anyhow::Result<Vec<u8>> {
    let name = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("start {name}"))?;
    let mut stdout = child.stdout.take().context("child stdout")?;
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + timeout;
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{name} did not finish within {} s", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader
        .join()
        .map_err(|_| anyhow::anyhow!("{name} output reader panicked"))
}

/// System-wide TCP retransmitted segments (`RetransSegs` in /proc/net/snmp).
fn retrans_segs() -> Option<u64> {
    procfs::net::snmp().ok().map(|s| s.tcp_retrans_segs)
}

/// Stream over a loopback TCP connection for `seconds` and count what arrives.
fn builtin_loopback(seconds: u32) -> anyhow::Result<NetResult> {
    let listener = TcpListener::bind("127.0.0.1:0").context("bind loopback listener")?;
    let addr = listener.local_addr()?;
    let receiver = std::thread::spawn(move || -> anyhow::Result<u64> {
        let (mut s, _) = listener.accept()?;
        s.set_read_timeout(Some(BUILTIN_READ_TIMEOUT))?;
        let mut buf = vec![0u8; BUILTIN_CHUNK_BYTES];
        let mut total = 0u64;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok(total);
            }
            total += n as u64;
        }
    });
    let retrans_before = retrans_segs();
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).context("connect loopback")?;
    let chunk = vec![0x5au8; BUILTIN_CHUNK_BYTES];
    let until = started + Duration::from_secs(u64::from(seconds));
    while Instant::now() < until {
        stream.write_all(&chunk).context("send")?;
    }
    stream.shutdown(Shutdown::Write)?;
    let received = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
    let elapsed = started.elapsed().as_secs_f64();
    let retransmits = match (retrans_before, retrans_segs()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    Ok(NetResult {
        mib_s: received as f64 / (1u64 << 20) as f64 / elapsed,
        retransmits,
        command: format!("built-in TCP stream over 127.0.0.1, {seconds} s, 1 MiB writes"),
        raw: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_retransmit_counter() {
        // Goal: the machine's TCP retransmit counter is read from /proc/net/snmp.
        assert!(retrans_segs().is_some());
    }

    #[test]
    fn parses_iperf3_summary() {
        // Goal: throughput comes from the receiver's sum, retransmits from the sender's.
        let json = serde_json::json!({"end": {
            "sum_sent": {"bits_per_second": 16.0e9, "retransmits": 7},
            "sum_received": {"bits_per_second": 8.0 * 1048576.0 * 1000.0}
        }});
        let (mib_s, retrans) = parse_iperf3(&json).unwrap();
        assert!((mib_s - 1000.0).abs() < 1e-6);
        assert_eq!(retrans, Some(7));
        assert!(parse_iperf3(&serde_json::json!({"error": "x"})).is_err());
    }

    #[test]
    fn hosts_have_stable_keys_and_readable_labels() {
        // Goal: a host's rows are keyed by its address (no characters the compare keys
        // use as separators) and labelled by its names and address.
        assert_eq!(host_key("10.0.0.2"), "10_0_0_2");
        assert_eq!(host_key("fd00::2"), "fd00__2");
        let h = StorageHost {
            ip: "10.0.0.2".into(),
            names: vec!["rack1-a".into()],
            osds: vec![3, 4],
        };
        assert_eq!(h.label(), "rack1-a (10.0.0.2)");
        let bare = StorageHost {
            names: vec!["10.0.0.2".into()],
            ..h.clone()
        };
        assert_eq!(bare.label(), "10.0.0.2");
    }

    #[test]
    fn builtin_stream_moves_data() {
        // Goal: the fallback test measures a positive loopback throughput.
        let r = builtin_loopback(1).unwrap();
        assert!(r.mib_s > 1.0, "{} MiB/s", r.mib_s);
    }
}
