//! What NBD clients learn about the exports of `basalt up`: the export list, sizes, block
//! sizes and flags (`nbdinfo --json`), and the `base:allocation` map after writes and trims.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::process::Command;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// `nbdinfo --json --no-content URI`, parsed; returns the single export object.
fn export_json(uri: &str) -> serde_json::Value {
    let bin = require_tool("nbdinfo", "libnbd-bin");
    let out = run(
        Command::new(bin).args(["--json", "--no-content", uri]),
        CLIENT_TIMEOUT,
    );
    assert_ok(&out, &format!("nbdinfo --json {uri}"));
    let v = parse_json(&out.stdout, "nbdinfo --json");
    let exports = v["exports"]
        .as_array()
        .unwrap_or_else(|| panic!("nbdinfo --json without exports: {v}"));
    assert_eq!(exports.len(), 1, "nbdinfo --json {uri}: {v}");
    exports[0].clone()
}

/// One extent of `nbdinfo --map --json`.
#[derive(Debug, Clone, Copy)]
struct Extent {
    offset: u64,
    length: u64,
    kind: u64,
}

/// `base:allocation` type bits (NBD_STATE_HOLE, NBD_STATE_ZERO).
const STATE_HOLE: u64 = 1;
const STATE_ZERO: u64 = 2;

/// `nbdinfo --map --json URI`, checked to tile [0, size) without gaps.
fn map(uri: &str, size: u64) -> Vec<Extent> {
    let bin = require_tool("nbdinfo", "libnbd-bin");
    let out = run(
        Command::new(bin).args(["--map", "--json", uri]),
        CLIENT_TIMEOUT,
    );
    assert_ok(&out, &format!("nbdinfo --map --json {uri}"));
    let v = parse_json(&out.stdout, "nbdinfo --map --json");
    let extents: Vec<Extent> = v
        .as_array()
        .unwrap_or_else(|| panic!("nbdinfo --map --json is not an array: {v}"))
        .iter()
        .map(|e| Extent {
            offset: e["offset"].as_u64().expect("extent offset"),
            length: e["length"].as_u64().expect("extent length"),
            kind: e["type"].as_u64().expect("extent type"),
        })
        .collect();
    let mut next = 0;
    for e in &extents {
        assert_eq!(e.offset, next, "map has a gap or overlap: {extents:?}");
        assert!(e.length > 0, "empty extent in map: {extents:?}");
        next = e.offset + e.length;
    }
    assert_eq!(
        next, size,
        "map does not end at the export size: {extents:?}"
    );
    extents
}

/// Assert every extent overlapping [start, end) satisfies `check`.
fn assert_range(extents: &[Extent], start: u64, end: u64, what: &str, check: impl Fn(u64) -> bool) {
    let mut covered = 0;
    for e in extents {
        let (a, b) = (e.offset.max(start), (e.offset + e.length).min(end));
        if a < b {
            assert!(
                check(e.kind),
                "[{start}, {end}) should be {what}, but [{a}, {b}) has type {}: {extents:?}",
                e.kind
            );
            covered += b - a;
        }
    }
    assert_eq!(covered, end - start, "map does not cover [{start}, {end})");
}

/// `nbdinfo --list` shows vol0 and a newly created volume, each with its own size.
#[test]
fn list_shows_default_and_created_volumes() {
    let nbdinfo = require_tool("nbdinfo", "libnbd-bin");
    let cluster = Cluster::start();
    assert_eq!(nbd_list(&cluster.server_uri()), vec!["vol0".to_string()]);
    cluster.volume_ok(&["create", "extra", "--size", "48M"]);
    let mut names = nbd_list(&cluster.server_uri());
    names.sort();
    assert_eq!(names, vec!["extra".to_string(), "vol0".to_string()]);
    // The plain text form too, as a user would run it.
    let out = run(
        Command::new(nbdinfo).args(["--list", &cluster.server_uri()]),
        CLIENT_TIMEOUT,
    );
    assert_ok(&out, "nbdinfo --list");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("export=\"vol0\""), "nbdinfo --list:\n{s}");
    assert!(s.contains("export=\"extra\""), "nbdinfo --list:\n{s}");
    assert_eq!(nbd_size(&cluster.uri("extra")), 48 * MIB);
    assert_eq!(nbd_size(&cluster.uri("vol0")), VOL0_BYTES);
}

/// `nbdinfo --json` reports the export's size, block sizes and the flags the contract
/// promises (flush, FUA, trim, zero, cache, multi-conn, base:allocation), on TCP and unix.
#[test]
fn json_reports_size_block_sizes_and_flags() {
    let cluster = Cluster::start();
    for uri in [cluster.uri("vol0"), cluster.unix_uri("vol0")] {
        let e = export_json(&uri);
        assert_eq!(e["export-name"].as_str(), Some("vol0"), "{e}");
        assert_eq!(e["export-size"].as_u64(), Some(VOL0_BYTES), "{e}");
        let min = e["block_size_minimum"]
            .as_u64()
            .expect("block_size_minimum");
        let pref = e["block_size_preferred"]
            .as_u64()
            .expect("block_size_preferred");
        let max = e["block_size_maximum"]
            .as_u64()
            .expect("block_size_maximum");
        // Byte-unaligned qemu-io writes must be allowed, so the minimum is at most 512;
        // the preferred size is the 4 KiB block below which the device does read-modify-write.
        assert!(
            min.is_power_of_two() && min <= 512,
            "block_size_minimum {min}"
        );
        assert_eq!(pref, 4096, "block_size_preferred");
        assert!(
            max >= 1 << 20 && max.is_power_of_two(),
            "block_size_maximum {max}"
        );
        for flag in [
            "can_flush",
            "can_fua",
            "can_trim",
            "can_zero",
            "can_cache",
            "can_multi_conn",
        ] {
            assert_eq!(e[flag].as_bool(), Some(true), "{flag} in {e}");
        }
        assert_eq!(e["is_read_only"].as_bool(), Some(false), "{e}");
        let contexts: Vec<&str> = e["contexts"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c.as_str()).collect())
            .unwrap_or_default();
        assert!(
            contexts.contains(&"base:allocation"),
            "contexts {contexts:?}"
        );
    }
    cluster.volume_ok(&["create", "small", "--size", "12M"]);
    let e = export_json(&cluster.uri("small"));
    assert_eq!(e["export-size"].as_u64(), Some(12 * MIB), "{e}");
}

/// After writes and trims, `nbdinfo --map` shows data where written and holes where trimmed
/// (object-aligned and 4 KiB-granular trims), and trimmed ranges read back as zeros.
#[test]
fn map_shows_data_then_holes_after_trim() {
    let cluster = Cluster::start();
    cluster.volume_ok(&["create", "mapvol", "--size", "8M"]);
    let uri = cluster.uri("mapvol");
    let size = 8 * MIB;

    // A fresh volume is one hole.
    let fresh = map(&uri, size);
    assert_range(&fresh, 0, size, "a hole", |t| t & STATE_HOLE != 0);

    qemu_io_ok(&uri, &["write -P 0x77 0 2M"]);
    let written = map(&uri, size);
    assert_range(&written, 0, 2 * MIB, "data", |t| t == 0);
    assert_range(&written, 2 * MIB, size, "a hole", |t| t & STATE_HOLE != 0);

    // Trim two whole 128 KiB objects and, inside another object, 8 KiB at 4 KiB granularity.
    let (obj_start, obj_end) = (256 * KIB, 512 * KIB);
    let (blk_start, blk_end) = (600 * KIB, 608 * KIB);
    qemu_io_ok(
        &uri,
        &[
            format!("discard {obj_start} {}", obj_end - obj_start),
            format!("discard {blk_start} {}", blk_end - blk_start),
        ],
    );
    let trimmed = map(&uri, size);
    let hole_zero = |t: u64| t & STATE_HOLE != 0 && t & STATE_ZERO != 0;
    assert_range(&trimmed, 0, obj_start, "data", |t| t == 0);
    assert_range(&trimmed, obj_start, obj_end, "hole,zero", hole_zero);
    assert_range(&trimmed, obj_end, blk_start, "data", |t| t == 0);
    assert_range(&trimmed, blk_start, blk_end, "hole,zero", hole_zero);
    assert_range(&trimmed, blk_end, 2 * MIB, "data", |t| t == 0);
    assert_range(&trimmed, 2 * MIB, size, "a hole", |t| t & STATE_HOLE != 0);

    // Trimmed ranges read as zeros; the rest keeps its data.
    qemu_io_ok(
        &uri,
        &[
            format!("read -P 0x77 0 {obj_start}"),
            format!("read -P 0 {obj_start} {}", obj_end - obj_start),
            format!("read -P 0x77 {obj_end} {}", blk_start - obj_end),
            format!("read -P 0 {blk_start} {}", blk_end - blk_start),
            format!("read -P 0x77 {blk_end} {}", 2 * MIB - blk_end),
            format!("read -P 0 {} {}", 2 * MIB, size - 2 * MIB),
        ],
    );

    // The text form a user reads: the trimmed object range is listed as a hole.
    let nbdinfo = require_tool("nbdinfo", "libnbd-bin");
    let out = run(Command::new(nbdinfo).args(["--map", &uri]), CLIENT_TIMEOUT);
    assert_ok(&out, "nbdinfo --map");
    let s = String::from_utf8_lossy(&out.stdout);
    let line = s
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&obj_start.to_string()))
        .unwrap_or_else(|| panic!("no extent starting at {obj_start} in:\n{s}"));
    assert!(
        line.contains("hole"),
        "extent at {obj_start} is not a hole: {line}\n{s}"
    );
}
