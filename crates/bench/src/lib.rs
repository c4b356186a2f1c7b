//! The storage benchmark suite behind `basalt bench storage` and `basalt bench compare`.
//!
//! A run measures the baselines first (the local disk under the data directory with fio, the
//! network with iperf3 or a built-in stream), then Basalt volumes through NBD with the
//! same fio profiles and the profiles of the seed reports (Torus, Vitastor), then a sweep over
//! OSD counts and replica counts (Simplyblock), and writes `report.md`, `results.json`, SVG
//! plots and every fio output under `OUT/raw/`. The cluster is a `basalt up` the run starts
//! ([`cluster`]) or an existing multi-host cluster reached through its metadata ([`existing`]);
//! the CPU its daemons spend is charged to every step ([`cpu`]).
//! Each part of the report is a [`sections::Section`], so later sections (S3, clones) plug in.
//!
//! `basalt bench nbd` ([`nbd`]) is the older, narrower comparison: a Basalt volume against
//! qemu-nbd on tmpfs, optionally with a multi-host cluster and its failover pause
//! ([`multihost`]).

pub mod cluster;
pub mod compare;
pub mod cpu;
pub mod environment;
pub mod existing;
pub mod fio;
pub mod fleet;
pub mod guest;
pub mod interrupt;
pub mod multihost;
pub mod nbd;
pub mod nbdclient;
pub mod procstat;
pub mod progress;
pub mod report;
pub mod results;
pub mod sections;
pub mod store_memory;
pub mod suite;
pub mod svg;
pub mod under_test;

pub use compare::compare_files;
pub use existing::ClusterAccess;
pub use nbd::NbdOptions;
pub use results::Results;
pub use suite::{run_storage, run_storage_on, StorageOptions, SECTION_IDS};
pub use under_test::{ExistingCluster, StreamResult, UnderTest};
