//! Basalt identifiers and the data-plane wire format.
//!
//! This crate does no I/O: it names things (objects, versions, OSDs, placement groups) and
//! encodes/decodes the fixed binary frames that travel between clients and OSDs. The byte
//! layout is specified in `docs/design.md` ("Data-plane wire format"); the KV table object
//! class's payloads and stored body in [`kv`] ("Object classes: KV tables"). [`size`] is the
//! workspace's one parser and formatter of sizes in bytes.

pub mod frame;
pub mod ids;
pub mod image;
pub mod kv;
pub mod size;
pub mod slowop;
pub mod unfound;

pub use frame::{
    DecodeError, Flags, Header, Opcode, Status, HEADER_LEN, LIST_ENTRY_BYTES, LIST_MAX_ENTRIES,
    MAX_PAYLOAD_BYTES, SCRUB_BATCH_OBJECTS, USAGE_MAX_INODES,
};
pub use ids::{
    inode_family, inode_pool, make_inode, EcProfile, InodeId, ObjectId, OsdId, PgId, PoolId,
    Version, CHUNK_KEY_BITS, MAX_CHUNK_POSITIONS,
};
pub use image::{ObjectImage, IMAGE_BLOCK_BYTES};
