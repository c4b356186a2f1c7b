//! The `/metrics` endpoint: a small hyper service answering `GET /metrics` with the
//! process's registry; another method on `/metrics` gets 405, any other path 404. One
//! request per connection, each connection bounded in time, and at most
//! [`MAX_CONNECTIONS`] served at once: past that, new connections are closed unanswered, so
//! a flood of connections costs a bounded amount of memory and never a thread.

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{header, Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Connections served at once; a scraper needs one, a few humans with curl a few more.
pub const MAX_CONNECTIONS: usize = 16;
/// Longest a connection may stay open, request and answer included.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// Request head buffer (hyper's smallest allowed); a longer head is refused.
const MAX_HEAD_BYTES: usize = 8 << 10;

/// Serve `registry` on `listener` until the task is aborted.
pub async fn serve(listener: TcpListener, registry: Arc<Registry>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, typically: wait for some to be released.
                tracing::debug!("accept on /metrics: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let answer = respond(&registry, &req);
                async move { Ok::<_, Infallible>(answer) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .max_buf_size(MAX_HEAD_BYTES)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
            drop(slot);
        });
    }
}

/// The answer to one request.
fn respond(registry: &Registry, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => {
            (StatusCode::OK, crate::CONTENT_TYPE, crate::render(registry))
        }
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET /metrics\n".to_string(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "try /metrics\n".to_string(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    if status == StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(header::ALLOW, header::HeaderValue::from_static("GET"));
    }
    response
}

/// Bind `addr` and serve `registry` there in the background; returns the bound address.
pub async fn start(
    addr: SocketAddr,
    registry: Arc<Registry>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    Ok((bound, tokio::spawn(serve(listener, registry))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The whole answer to `request`; empty when the server closed (or reset) the
    /// connection without one.
    async fn ask(addr: SocketAddr, request: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = s.write_all(request.as_bytes()).await;
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
            .await
            .expect("the server closes the connection");
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn only_get_metrics_is_served_and_a_flood_stays_bounded() {
        // Goal: GET /metrics answers the registry (and closes, even without "Connection:
        // close"); POST gets 405 with Allow; another path 404; connections past the cap are
        // closed, and once the flood is gone scrapes are served again.
        let mut registry = Registry::default();
        let c = prometheus_client::metrics::counter::Counter::<u64>::default();
        c.inc_by(7);
        registry.register("basalt_test_things", "Things", c);
        let (addr, task) = start("127.0.0.1:0".parse().unwrap(), Arc::new(registry))
            .await
            .unwrap();
        let ok = ask(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(ok.contains("basalt_test_things_total 7\n"), "{ok}");
        assert!(ok.contains("text/plain; version=0.0.4"), "{ok}");
        let post = ask(
            addr,
            "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        assert!(post.to_ascii_lowercase().contains("allow: get"), "{post}");
        let other = ask(addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");

        // Idle connections fill every slot; the next one is closed without an answer.
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        // Let the server accept them all before the extra one arrives.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let refused = ask(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(refused.is_empty(), "{refused}");
        drop(idle);
        let mut served = String::new();
        for _ in 0..50 {
            served = ask(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
            if served.starts_with("HTTP/1.1 200") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(served.starts_with("HTTP/1.1 200"), "{served}");
        task.abort();
    }
}
