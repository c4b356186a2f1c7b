//! A monitor candidate in this process (every OSD runs one by default, `basalt mon` runs
//! one alone, `basalt up` runs one beside its OSDs).

use basalt_meta::MetaStore;
use basalt_mon::MonitorConfig;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Settings of a monitor candidate.
#[derive(Clone, Copy, Debug)]
pub struct MonitorSettings {
    /// Seconds an OSD may stay down before it is marked out and its data re-replicated.
    pub out_after_secs: u64,
    /// TTL in seconds of the monitor role's lease.
    pub lease_ttl_secs: u64,
    /// OSDs that must report an OSD unreachable before it is marked down by reports.
    pub min_down_reporters: usize,
    /// Milliseconds an OSD must stay reported before it is marked down.
    pub report_settle_ms: u64,
}

/// A running monitor candidate; it takes the role when no one holds it.
pub struct Monitor {
    stop_tx: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Monitor {
    /// Start a candidate named `holder` (shown as the role's holder in `basalt status`).
    pub fn spawn(meta: Arc<dyn MetaStore>, holder: String, settings: MonitorSettings) -> Self {
        let mut config = MonitorConfig::new(holder);
        config.out_after_secs = settings.out_after_secs;
        config.lease_ttl_secs = settings.lease_ttl_secs;
        config.min_down_reporters = settings.min_down_reporters;
        config.report_settle_ms = settings.report_settle_ms;
        let (stop_tx, stop_rx) = watch::channel(false);
        let task = tokio::spawn(basalt_mon::run(meta, config, stop_rx));
        Self { stop_tx, task }
    }

    /// Stop, giving up the role if held, and wait until it has.
    pub async fn stop(self) {
        let _ = self.stop_tx.send(true);
        let _ = self.task.await;
    }
}
