//! A minimal HTTP endpoint serving `GET /metrics` in the Prometheus text format. One request
//! per connection, bounded in size and time; anything else gets 404 or 400. Every response
//! ends with the standard process metrics (CPU time, resident memory), as Prometheus client
//! libraries export them, so `basalt bench storage --cluster etcd://...` can charge each
//! daemon's CPU to the work it did.

use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest request head read.
const MAX_REQUEST_BYTES: usize = 8 << 10;
/// Longest time a client may take to send its request.
const REQUEST_TIMEOUT_MS: u64 = 5_000;

/// Renders the current metrics.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Serve until the task is aborted.
pub async fn serve(listener: TcpListener, render: Render) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(
                Duration::from_millis(REQUEST_TIMEOUT_MS),
                answer(stream, render),
            )
            .await;
        });
    }
}

async fn answer(mut stream: TcpStream, render: Render) -> std::io::Result<()> {
    let mut buf = vec![0u8; MAX_REQUEST_BYTES];
    let mut n = 0;
    while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
        if n == buf.len() {
            return respond(&mut stream, "400 Bad Request", "request too large\n").await;
        }
        let read = stream.read(&mut buf[n..]).await?;
        if read == 0 {
            return Ok(());
        }
        n += read;
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let mut parts = head.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some("GET"), Some("/metrics")) => {
            let mut body = render();
            body.push_str(&process_metrics());
            respond(&mut stream, "200 OK", &body).await
        }
        (Some(_), Some(_)) => respond(&mut stream, "404 Not Found", "try /metrics\n").await,
        _ => respond(&mut stream, "400 Bad Request", "malformed request\n").await,
    }
}

async fn respond(stream: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

/// `process_cpu_seconds_total` (user + system time of every thread, from /proc/self/stat) and
/// `process_resident_memory_bytes`, named and typed as Prometheus's process collector does;
/// nothing when /proc cannot be read.
pub fn process_metrics() -> String {
    let Ok(stat) = basalt_bench::procstat::read(std::process::id()) else {
        return String::new();
    };
    format!(
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n\
         # TYPE process_cpu_seconds_total counter\n\
         process_cpu_seconds_total {}\n\
         # HELP process_resident_memory_bytes Resident memory size in bytes.\n\
         # TYPE process_resident_memory_bytes gauge\n\
         process_resident_memory_bytes {}\n",
        stat.cpu_seconds, stat.resident_bytes
    )
}

/// Bind `addr` and serve metrics there in the background.
pub async fn start(
    addr: std::net::SocketAddr,
    render: Render,
) -> anyhow::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    use anyhow::Context;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("listen for /metrics on {addr}"))?;
    let bound = listener.local_addr()?;
    Ok((bound, tokio::spawn(serve(listener, render))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_metrics_follow_the_prometheus_names() {
        // Goal: every /metrics ends with the standard process CPU and memory series, as
        // numbers a scraper reads back.
        let text = process_metrics();
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        };
        assert!(text.contains("# TYPE process_cpu_seconds_total counter"));
        assert!(text.contains("# TYPE process_resident_memory_bytes gauge"));
        assert!(value("process_cpu_seconds_total ") >= 0.0);
        assert!(value("process_resident_memory_bytes ") > 0.0);
    }
}
