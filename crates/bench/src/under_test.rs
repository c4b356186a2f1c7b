//! The Basalt cluster a run measures, whichever it is: a `basalt up` the benchmark starts
//! itself ([`crate::cluster::UpProcess`]), or a volume the benchmark creates in an existing
//! multi-host cluster and serves over NBD from its own process (`--cluster etcd://...`,
//! [`crate::existing::Existing`], with the client library and the gateway the `basalt nbd`
//! daemon runs).

use crate::cpu::CpuSource;
use crate::results::{ExistingClusterInfo, PoolSettings};
use std::path::Path;

/// A Basalt volume under test: where fio reaches it and whose CPU counts as Basalt's.
pub trait UnderTest {
    /// NBD URI of the bench volume (`nbd://...` or `nbd+unix:///NAME?socket=PATH`).
    fn uri(&self) -> &str;

    /// The daemons whose CPU time is charged to each Basalt step.
    fn cpu_sources(&self) -> Vec<CpuSource>;

    /// Release what the run made (stop `basalt up`, remove the bench volume) and say what
    /// happened, for the report. Dropping without closing releases too, silently.
    fn close(&mut self) -> Vec<String>;

    /// The control API of a local `basalt up` (None for an existing cluster).
    fn control(&self) -> Option<String> {
        None
    }

    /// The S3 gateway of the cluster under test and an access key for it, if there is one.
    fn s3(&self) -> Option<S3Endpoint> {
        None
    }

    /// The NVMe/TCP target serving the cluster's volumes, if there is one.
    fn nvmf(&self) -> Option<std::net::SocketAddr> {
        None
    }
}

/// An S3 endpoint and the key to use it with.
#[derive(Clone, Debug)]
pub struct S3Endpoint {
    /// `http://IP:PORT`.
    pub url: String,
    pub access_key: String,
    pub secret_key: String,
}

/// An existing multi-host cluster, reached through its metadata (`--cluster etcd://...`).
pub trait ExistingCluster {
    /// What the report says of the cluster: its metadata URL, storage hosts and the pool's
    /// settings, all from the cluster map.
    fn info(&self) -> ExistingClusterInfo;

    /// The settings of the pool the bench volume goes into, from the cluster map.
    fn pool(&self) -> PoolSettings;

    /// Create a volume of `size_bytes` in the pool and serve it over NBD from this process,
    /// on a unix socket in `dir` (a private directory). Closing or dropping the result stops
    /// serving and removes the volume.
    fn serve_volume(&self, size_bytes: u64, dir: &Path) -> anyhow::Result<Box<dyn UnderTest>>;

    /// The built-in network test toward this host from storage host `ip`, for `seconds`:
    /// used where no iperf3 server answers there.
    fn stream_from(&self, ip: &str, seconds: u32) -> anyhow::Result<StreamResult>;
}

/// What the built-in network test measured.
#[derive(Clone, Debug)]
pub struct StreamResult {
    /// Received throughput, MiB/s.
    pub mib_s: f64,
    /// How it was measured, for the report's command column.
    pub method: String,
}
