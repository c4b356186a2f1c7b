//! Object-backed read-only volumes (issue 14; docs/design.md, "Object-backed volumes"): an
//! S3 bucket served as a block device holding an EROFS filesystem whose metadata is an
//! index built once from the bucket's listing and whose file data is fetched lazily.
//!
//! Layout: [`catalog`] objvols in the cluster (record, stored index, opening a reader) ·
//! [`build`] the listing fed to the writers · [`erofs`] the streaming image writer (superblock, inodes, directories; file
//! data is a virtual region described by the extents the writer hands out) · [`extents`]
//! the map from data blocks to objects · [`reader`] the device's bytes (index, objects,
//! zeros), with [`readahead`] (sequential streams) and [`cache`] (what was fetched ahead)
//! · [`s3`] an S3 endpoint as lister and object source · [`mount`] the
//! kernel mount through nbdfuse and a loop device (bench and tests).

pub mod build;
pub mod cache;
pub mod catalog;
pub mod erofs;
pub mod extents;
pub mod mount;
pub mod readahead;
pub mod reader;
pub mod s3;

pub use catalog::{ObjvolInfo, ObjvolState, Source};
