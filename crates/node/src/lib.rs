//! What a Basalt process runs: the lifecycles of the daemons of a multi-host cluster
//! (`basalt osd`, `mon`, `nbd`, `nvmf`, `s3`) and `basalt up`'s one-process cluster. Each
//! takes a plain config (the CLI turns its flags into one), starts, reports where it serves,
//! and stops cleanly. Every OSD, here and in the simulator, starts through
//! [`basalt_osd::RunningOsd`].
//!
//! `local` assembles `basalt up` (its pools, OSDs, frontends), `ready` is its ready file,
//! `osd_daemon` and `gateway` the multi-host daemons, `s3_gateway` the S3 gateway of both
//! `basalt up` and `basalt s3`, `image_import` the import of VM images into a cluster,
//! `monitor` the monitor candidate, `metrics_http` every process's `/metrics`, `data_tls`
//! the making of data-plane TLS credentials, `signal` how a daemon is told to stop.

pub mod build;
pub mod data_tls;
pub mod gateway;
pub mod image_import;
pub mod local;
pub mod metrics_http;
pub mod monitor;
pub mod osd_daemon;
pub mod ready;
pub mod s3_gateway;
pub mod signal;
pub mod systemd;

pub use gateway::{GatewayConfig, NbdGateway, NvmfGateway};
pub use local::{LocalCluster, LocalConfig};
pub use monitor::{Monitor, MonitorSettings};
pub use osd_daemon::{hostname, OsdDaemon, OsdDaemonConfig};
pub use ready::{Endpoints, ReadyFile};
pub use s3_gateway::{S3Daemon, S3DaemonConfig, S3Settings};
pub use signal::wait_for_signal;
