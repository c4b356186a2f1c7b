//! A simulated cluster: the real OSDs (on in-memory disks), a monitor and a client, every one
//! a node of the simulated network with its own view of the shared metadata store. Processes
//! can be killed, power-cut and restarted; nodes partitioned and cut from the metadata.

use crate::meta::NodeMeta;
use crate::net::{SimNet, CLIENT_NODE, MON_NODE};
use crate::rng::SimRng;
use basalt_client::{Cluster, ConnPool};
use basalt_meta::schema::PoolRecord;
use basalt_meta::{EmbeddedMeta, MetaStore};
use basalt_mon::MonitorConfig;
use basalt_osd::{
    Network, Osd, OsdConfig, RecoveryConfig, Registration, RunningOsd, StoreLocation,
};
use basalt_proto::{EcProfile, OsdId};
use basalt_store::{MemDisk, StoreOptions};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Shape of a simulated cluster.
#[derive(Clone, Debug)]
pub struct ClusterShape {
    pub osds: u32,
    /// Replicas per object, and the fewest that still take I/O.
    pub size: u32,
    pub min_size: u32,
    pub pgs: u32,
    pub object_size: u32,
    /// Each OSD's store capacity.
    pub capacity_bytes: u64,
    /// Liveness and monitor lease TTL.
    pub lease_ttl_secs: u64,
    /// How long an OSD may be down before its data is re-replicated elsewhere.
    pub out_after_secs: u64,
    /// An erasure-coded pool instead of a replicated one: `size` is then k + m,
    /// `object_size` the stripe's bytes and each OSD stores chunks of `object_size / k`.
    pub ec: Option<EcProfile>,
}

impl Default for ClusterShape {
    fn default() -> Self {
        ClusterShape {
            osds: 4,
            size: 3,
            min_size: 2,
            pgs: 8,
            object_size: 64 << 10,
            capacity_bytes: 24 << 20,
            lease_ttl_secs: 3,
            out_after_secs: 20,
            ec: None,
        }
    }
}

impl ClusterShape {
    /// This shape with an erasure-coded `k`+`m` pool of min_size `min_size` instead (size
    /// k + m), on at least k + m + 1 OSDs so a position can move when its OSD goes out.
    pub fn with_ec(self, k: u32, m: u32, min_size: u32) -> ClusterShape {
        ClusterShape {
            osds: self.osds.max(k + m + 1),
            size: k + m,
            min_size,
            ec: Some(EcProfile { k, m }),
            ..self
        }
    }

    /// Bytes of one object of an OSD's store: a chunk (erasure coded) or a whole object.
    pub fn store_object_bytes(&self) -> u32 {
        match self.ec {
            Some(ec) => self.object_size / ec.k,
            None => self.object_size,
        }
    }
}

/// One OSD's machine: its disk outlives its processes.
struct OsdSlot {
    disk: Arc<MemDisk>,
    /// The running process, if any.
    running: Option<RunningOsd>,
    /// Process starts so far (each gets its own incarnation number).
    starts: u64,
}

/// The address the map advertises for `id` (never bound: the simulated network routes it).
pub fn osd_addr(id: OsdId) -> std::net::SocketAddr {
    std::net::SocketAddr::from(([10, 0, (id >> 8) as u8, (id & 0xff) as u8 + 1], 6800))
}

/// A running simulated cluster.
pub struct SimCluster {
    pub shape: ClusterShape,
    pub net: Arc<SimNet>,
    meta: Arc<EmbeddedMeta>,
    osds: BTreeMap<OsdId, OsdSlot>,
    pool: PoolRecord,
    /// The workload's client.
    pub client: Arc<Cluster>,
    _mon: JoinHandle<()>,
    _mon_stop: watch::Sender<bool>,
    /// Incarnation numbers: a per-run counter, so runs replay.
    seed_incarnations: SimRng,
}

/// Cluster set-up failures (a bug or a bad shape: the seed fails).
pub type SetupError = String;

impl SimCluster {
    /// Create the pool, start every OSD and the monitor, and open a client.
    pub async fn start(shape: ClusterShape, rng: &mut SimRng) -> Result<SimCluster, SetupError> {
        let net = SimNet::new(rng.fork());
        let meta = Arc::new(EmbeddedMeta::in_memory());
        let pool = basalt_client::create_pool(
            meta.as_ref(),
            PoolRecord {
                id: 0,
                name: "sim".into(),
                size: shape.size,
                min_size: shape.min_size,
                pg_count: shape.pgs,
                failure_domain: "osd".into(),
                object_size: shape.object_size,
                ec: shape.ec,
                device_class: None,
            },
        )
        .await
        .map_err(|e| format!("create pool: {e}"))?;
        let mon_inc = net.start_node(MON_NODE);
        let mon_meta: Arc<dyn MetaStore> =
            Arc::new(NodeMeta::new(meta.clone(), net.clone(), MON_NODE, mon_inc));
        let mut mon_config = MonitorConfig::new("sim monitor");
        mon_config.lease_ttl_secs = shape.lease_ttl_secs;
        mon_config.out_after_secs = shape.out_after_secs;
        let (mon_stop, mon_stop_rx) = watch::channel(false);
        let mon = tokio::spawn(basalt_mon::run(mon_meta, mon_config, mon_stop_rx));
        let client_inc = net.start_node(CLIENT_NODE);
        let client_meta: Arc<dyn MetaStore> = Arc::new(NodeMeta::new(
            meta.clone(),
            net.clone(),
            CLIENT_NODE,
            client_inc,
        ));
        let map = basalt_client::follow_map(client_meta.clone())
            .await
            .map_err(|e| format!("client map: {e}"))?;
        let client = Cluster::with_conns(
            client_meta,
            map,
            ConnPool::with_dialer(net.dialer(CLIENT_NODE, client_inc)),
        );
        let mut cluster = SimCluster {
            osds: (0..shape.osds)
                .map(|id| {
                    let slot = OsdSlot {
                        disk: MemDisk::new(shape.capacity_bytes),
                        running: None,
                        starts: 0,
                    };
                    (id, slot)
                })
                .collect(),
            shape,
            net,
            meta,
            pool,
            client,
            _mon: mon,
            _mon_stop: mon_stop,
            seed_incarnations: rng.fork(),
        };
        let ids: Vec<OsdId> = cluster.osds.keys().copied().collect();
        for id in ids {
            cluster.start_osd(id).await?;
        }
        Ok(cluster)
    }

    /// The metadata store itself (for checkers: every node reaches it through its own view).
    pub fn meta(&self) -> Arc<EmbeddedMeta> {
        self.meta.clone()
    }

    /// The pool every volume lives in.
    pub fn pool(&self) -> &PoolRecord {
        &self.pool
    }

    /// Ids of every OSD.
    pub fn osd_ids(&self) -> Vec<OsdId> {
        self.osds.keys().copied().collect()
    }

    /// Is the OSD's process running?
    pub fn is_running(&self, id: OsdId) -> bool {
        self.osds.get(&id).is_some_and(|s| s.running.is_some())
    }

    /// The running OSD, if any.
    pub fn osd(&self, id: OsdId) -> Option<&Arc<Osd>> {
        self.osds
            .get(&id)
            .and_then(|s| s.running.as_ref())
            .map(|r| r.osd())
    }

    /// Start a new process of OSD `id` on its disk (formatting it on the first start).
    pub async fn start_osd(&mut self, id: OsdId) -> Result<(), SetupError> {
        let incarnation = self.seed_incarnations.next_u64() | 1;
        let slot = self.osds.get_mut(&id).ok_or(format!("no osd.{id}"))?;
        if slot.running.is_some() {
            return Err(format!("osd.{id} is already running"));
        }
        let first = slot.starts == 0;
        slot.starts += 1;
        let node_inc = self.net.start_node(id);
        let addr = osd_addr(id);
        let meta: Arc<dyn MetaStore> = Arc::new(NodeMeta::new(
            self.meta.clone(),
            self.net.clone(),
            id,
            node_inc,
        ));
        let map = basalt_client::follow_map(meta.clone())
            .await
            .map_err(|e| format!("osd.{id} map: {e}"))?;
        let config = OsdConfig {
            id,
            store: StoreLocation::Disk(slot.disk.attach()),
            store_options: StoreOptions {
                capacity_bytes: self.shape.capacity_bytes,
                object_size_bytes: self.shape.store_object_bytes(),
                wal_bytes: 4 << 20,
            },
            listen: addr,
            network: Network::InProcess {
                listener: self.net.listen(id, &addr.to_string()),
                dialer: self.net.dialer(id, node_inc),
            },
            create_if_missing: first,
            incarnation: Some(incarnation),
            recovery: RecoveryConfig::default(),
            stray_scan: Some(Duration::from_secs(10)),
            auth: None,
            io: basalt_store::IoOptions::default(),
            // What `basalt osd` runs: peers report each other, primaries hold peer leases.
            heartbeat: Some(basalt_osd::HeartbeatConfig::default()),
        };
        let registration = Registration {
            host: format!("host{id}"),
            location: Default::default(),
            class: "ssd".into(),
            lease_ttl_secs: self.shape.lease_ttl_secs,
            metrics_addr: None,
            version: "sim".into(),
        };
        let running = RunningOsd::start(config, map, meta, registration)
            .await
            .map_err(|e| format!("start osd.{id}: {e}"))?;
        slot.running = Some(running);
        Ok(())
    }

    /// Take the OSD's process away at once (no clean shutdown, nothing revoked).
    fn end_process(&mut self, id: OsdId) -> Option<Arc<MemDisk>> {
        let slot = self.osds.get_mut(&id)?;
        let running = slot.running.take()?;
        self.net.kill_node(id);
        // The OSD's loops end; its leftover tasks find the disk, the network and the
        // metadata gone.
        running.abandon();
        Some(slot.disk.clone())
    }

    /// kill -9 of the OSD's process: the page cache survives.
    pub fn kill_osd(&mut self, id: OsdId) {
        if let Some(disk) = self.end_process(id) {
            disk.crash();
        }
    }

    /// The OSD's machine loses power: of what was written since the last sync, the pages for
    /// which `keep` says true survive.
    pub fn power_cut_osd(&mut self, id: OsdId, keep: impl FnMut(u64) -> bool) {
        if let Some(disk) = self.end_process(id) {
            disk.power_cut(keep);
        }
    }

    /// Read a block straight from an OSD's store (for the replica check).
    pub fn store_version(
        &self,
        id: OsdId,
        obj: basalt_proto::ObjectId,
    ) -> Option<basalt_proto::Version> {
        self.osd(id).and_then(|o| o.store.version(obj))
    }
}
