//! One OSD process's life: start serving, register with the cluster (static record and
//! liveness lease), and stop cleanly (revoke the lease so the OSD is marked down at once,
//! then checkpoint and close the store). `basalt osd`, `basalt up` and the simulator all
//! go through here.

use crate::daemon::{Osd, OsdConfig, OsdError, OsdHandle};
use crate::liveness::{register, Registration};
use basalt_meta::MetaStore;
use basalt_placement::ClusterMap;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A started and registered OSD.
pub struct RunningOsd {
    pub handle: OsdHandle,
    keepalive: JoinHandle<()>,
    stop_tx: watch::Sender<bool>,
}

impl RunningOsd {
    /// Start the OSD described by `config` and register it as `registration` says.
    pub async fn start(
        config: OsdConfig,
        map: watch::Receiver<Arc<ClusterMap>>,
        meta: Arc<dyn MetaStore>,
        registration: Registration,
    ) -> Result<RunningOsd, OsdError> {
        refuse_removed(meta.as_ref(), config.id).await?;
        let handle = Osd::start(config, map, meta).await?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let keepalive = register(handle.osd.clone(), handle.addr, registration, stop_rx)
            .await
            .map_err(OsdError::Register)?;
        Ok(RunningOsd {
            handle,
            keepalive,
            stop_tx,
        })
    }

    /// The OSD.
    pub fn osd(&self) -> &Arc<Osd> {
        &self.handle.osd
    }

    /// Stop cleanly: give up the liveness lease (the monitor marks the OSD down at once),
    /// then stop serving and close the store.
    pub async fn stop(self) -> Result<(), OsdError> {
        let _ = self.stop_tx.send(true);
        let _ = self.keepalive.await;
        self.handle.shutdown().await
    }

    /// End at once, as a crash would: nothing is revoked or closed (the simulator's kill).
    pub fn abandon(self) {
        self.keepalive.abort();
        drop(self.stop_tx);
        drop(self.handle);
    }
}

/// Refuse to start OSD `id` once `basalt osd rm` removed it: its PGs were placed elsewhere
/// and its data given up, so re-registering it silently would bring back a stale copy.
async fn refuse_removed(meta: &dyn MetaStore, id: basalt_proto::OsdId) -> Result<(), OsdError> {
    let key = basalt_meta::schema::removed_osd_key(id);
    match meta.get(&key).await.map_err(OsdError::Register)? {
        Some(_) => Err(OsdError::Removed { id }),
        None => Ok(()),
    }
}
