//! A minimal HTTP endpoint serving `GET /metrics` in the Prometheus text format. One request
//! per connection, bounded in size and time; anything else gets 404 or 400.

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
        (Some("GET"), Some("/metrics")) => respond(&mut stream, "200 OK", &render()).await,
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
