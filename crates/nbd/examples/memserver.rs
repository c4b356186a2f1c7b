//! Serve in-memory exports over TCP, for manual tests and benchmarks.
//!
//! Usage: `memserver [ADDR] [SIZE_MIB] [NAMES...]` (defaults: 127.0.0.1:10809, 256, `mem`).
//! Each name becomes a sparse MemDevice of SIZE_MIB; the first is also the default export.
//! Stops on Ctrl-C (graceful shutdown).

use std::sync::Arc;

use basalt_nbd::{ExportMap, MemDevice, Server};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:10809".into());
    let size_mib: u64 = match args.next().map(|s| s.parse()) {
        Some(Ok(n)) => n,
        Some(Err(e)) => return Err(std::io::Error::other(format!("SIZE_MIB: {e}"))),
        None => 256,
    };
    let mut names: Vec<String> = args.collect();
    if names.is_empty() {
        names.push("mem".into());
    }
    let exports = Arc::new(ExportMap::new());
    for name in &names {
        let device = Arc::new(MemDevice::new(size_mib << 20));
        exports.insert(name.clone(), format!("{size_mib} MiB in memory"), device);
    }
    exports.set_default(Some(names[0].clone()));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("serving {names:?} on nbd://{}", listener.local_addr()?);
    let server = Server::new(exports);
    let stopper = server.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stopper.shutdown();
        }
    });
    server.serve_tcp(listener).await
}
