//! How a daemon is told to stop: Ctrl-C or SIGTERM.

use anyhow::Context;

/// Wait for Ctrl-C (SIGINT) or SIGTERM.
pub async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("wait for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}
