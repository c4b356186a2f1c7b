//! What this process is: the release and commit of its binary, and the wire and store
//! formats it speaks. OSDs publish it in their liveness record (`basalt osd ls`, `status`
//! warns when versions are mixed), every daemon in `/metrics` (`basalt_build_info`).

use std::sync::OnceLock;

/// This process's build identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildInfo {
    /// `0.1.0 (1a2b3c4d5e)`: the release and the commit it was built from.
    pub version: String,
    /// The data-plane frame version it speaks.
    pub wire: u8,
    /// The store superblock format it writes.
    pub store_format: u32,
}

static VERSION: OnceLock<String> = OnceLock::new();

/// Name this process's version, once, at start (the binary knows its commit; the libraries
/// do not). Later calls are ignored.
pub fn set_version(version: &str) {
    let _ = VERSION.set(version.to_string());
}

/// This process's build identity (version `CARGO_PKG_VERSION` alone when the binary did
/// not name one: library tests, the simulator).
pub fn info() -> BuildInfo {
    BuildInfo {
        version: VERSION
            .get()
            .cloned()
            .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_string()),
        wire: basalt_proto::frame::WIRE_VERSION,
        store_format: basalt_store::SUPERBLOCK_FORMAT_VERSION,
    }
}
