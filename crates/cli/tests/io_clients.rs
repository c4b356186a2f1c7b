//! Data-path tests of `basalt up` with real NBD clients: qemu-io, qemu-img, nbdcopy and fio,
//! over TCP and the unix socket, one connection and several at once.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::process::Command;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// The pool's object size (`basalt up` default): writes crossing it span two objects.
const OBJECT_BYTES: u64 = 128 * KIB;

/// One `qemu-io -P` pattern write, kept to build the expected image.
struct PatternWrite {
    offset: u64,
    len: u64,
    pattern: u8,
}

fn write_cmd(w: &PatternWrite) -> String {
    format!("write -P 0x{:02x} {} {}", w.pattern, w.offset, w.len)
}

fn read_cmd(w: &PatternWrite) -> String {
    format!("read -P 0x{:02x} {} {}", w.pattern, w.offset, w.len)
}

/// Apply `writes` in order to a zeroed image of `len` bytes.
fn model(len: u64, writes: &[PatternWrite]) -> Vec<u8> {
    let mut img = vec![0u8; len as usize];
    for w in writes {
        img[w.offset as usize..(w.offset + w.len) as usize].fill(w.pattern);
    }
    img
}

/// qemu-io pattern writes (aligned, 512-aligned, byte-unaligned, across object boundaries)
/// read back with verified patterns over TCP and the unix socket, and the whole prefix
/// matches a byte model (no stray bytes written anywhere else).
#[test]
fn qemu_io_patterns_tcp_and_unix() {
    let cluster = Cluster::start();
    let tcp = cluster.uri("vol0");
    let unix = cluster.unix_uri("vol0");

    // The contract's own example first.
    qemu_io_ok(&tcp, &["write -P 0x5a 0 1M", "read -P 0x5a 0 1M"]);

    let tcp_writes = [
        PatternWrite {
            offset: 0,
            len: MIB,
            pattern: 0x5a,
        },
        // 512-byte aligned, not 4 KiB aligned, length not a multiple of 4 KiB.
        PatternWrite {
            offset: 4 * MIB + 512,
            len: 11_776,
            pattern: 0x11,
        },
        // Byte-unaligned offset and length inside one 4 KiB block.
        PatternWrite {
            offset: 5 * MIB + 1000,
            len: 777,
            pattern: 0x22,
        },
        // Crossing one 128 KiB object boundary, unaligned at both ends.
        PatternWrite {
            offset: 100 * OBJECT_BYTES - 6000,
            len: 12_345,
            pattern: 0x33,
        },
        // Spanning five objects.
        PatternWrite {
            offset: 8 * MIB - 64 * KIB,
            len: 576 * KIB,
            pattern: 0x44,
        },
        // Overwrite of the middle of an earlier write, unaligned.
        PatternWrite {
            offset: 300_001,
            len: 70_000,
            pattern: 0x66,
        },
    ];
    let unix_writes = [
        PatternWrite {
            offset: 12 * MIB - 513,
            len: 1026,
            pattern: 0x77,
        },
        PatternWrite {
            offset: 14 * MIB,
            len: 256 * KIB,
            pattern: 0x88,
        },
    ];
    let writes: Vec<String> = tcp_writes.iter().map(write_cmd).collect();
    qemu_io_ok(&tcp, &writes);
    let writes: Vec<String> = unix_writes.iter().map(write_cmd).collect();
    qemu_io_ok(&unix, &writes);

    // Read back on fresh connections. The first write was partly overwritten by the last
    // TCP write, so it is checked in its two surviving pieces.
    let all: Vec<PatternWrite> = tcp_writes.into_iter().chain(unix_writes).collect();
    let mut reads: Vec<String> = all[1..].iter().map(read_cmd).collect();
    reads.push("read -P 0x5a 0 300001".to_string());
    reads.push(format!("read -P 0x5a 370001 {}", MIB - 370_001));
    qemu_io_ok(&tcp, &reads);
    qemu_io_ok(&unix, &reads);
    // The bytes just around an unaligned write are untouched.
    qemu_io_ok(
        &unix,
        &[
            format!("read -P 0 {} 1000", 5 * MIB),
            format!("read -P 0 {} 3319", 5 * MIB + 1777),
        ],
    );

    let len_mib = 16;
    let want = model(len_mib * MIB, &all);
    let got = read_export_prefix(&tcp, len_mib, &cluster.scratch().join("prefix.raw"));
    assert_same_bytes(&got, &want, "first 16 MiB of vol0 after qemu-io writes");
}

/// qemu-img convert copies a random 64 MiB file into vol0 and back out byte for byte.
#[test]
fn qemu_img_convert_round_trip() {
    let qemu_img = require_tool("qemu-img", "qemu-utils");
    let cluster = Cluster::start();
    let dir = cluster.scratch();
    let len = 64 * MIB;
    let data = pseudo_random(0xc0ffee, len as usize);
    let src = dir.join("src.raw");
    std::fs::write(&src, &data).expect("write source file");

    let uri = cluster.uri("vol0");
    let out = run(
        Command::new(&qemu_img)
            .args(["convert", "-n", "-f", "raw", "-O", "raw"])
            .arg(&src)
            .arg(&uri),
        CLIENT_TIMEOUT,
    );
    assert_ok(&out, "qemu-img convert file -> vol0");

    // Back out, limited to the first 64 MiB of the 1 GiB volume by the raw driver's `size`.
    let dst = dir.join("dst.raw");
    let opts = format!(
        "driver=raw,size={len},file.driver=nbd,file.server.type=inet,\
         file.server.host={},file.server.port={},file.export=vol0",
        cluster.nbd_addr.ip(),
        cluster.nbd_addr.port()
    );
    let out = run(
        Command::new(&qemu_img)
            .args(["convert", "-O", "raw", "--image-opts", &opts])
            .arg(&dst),
        CLIENT_TIMEOUT,
    );
    assert_ok(&out, "qemu-img convert vol0 -> file");
    let back = std::fs::read(&dst).expect("read converted file");
    assert_same_bytes(
        &back,
        &data,
        "64 MiB copied in and out with qemu-img convert",
    );
}

/// nbdcopy copies a random file into a new 32 MiB volume and back out byte for byte.
#[test]
fn nbdcopy_round_trip() {
    let nbdcopy = require_tool("nbdcopy", "libnbd-bin");
    let cluster = Cluster::start();
    cluster.volume_ok(&["create", "copyvol", "--size", "32M"]);
    let dir = cluster.scratch();
    let data = pseudo_random(0xbeef, 32 * MIB as usize);
    let src = dir.join("src.raw");
    std::fs::write(&src, &data).expect("write source file");
    let uri = cluster.uri("copyvol");

    let out = run(Command::new(&nbdcopy).arg(&src).arg(&uri), CLIENT_TIMEOUT);
    assert_ok(&out, "nbdcopy file -> copyvol");
    let dst = dir.join("dst.raw");
    let out = run(Command::new(&nbdcopy).arg(&uri).arg(&dst), CLIENT_TIMEOUT);
    assert_ok(&out, "nbdcopy copyvol -> file");
    let back = std::fs::read(&dst).expect("read copied file");
    assert_same_bytes(&back, &data, "32 MiB copied in and out with nbdcopy");
}

/// fio (ioengine=nbd) random 4 KiB writes at queue depth 16 verify with crc32c, no errors.
#[test]
fn fio_randwrite_verify_crc32c() {
    let fio = require_tool("fio", "fio");
    let cluster = Cluster::start();
    let json_path = cluster.scratch().join("fio.json");
    let size_bytes: u64 = 64 * MIB;
    let out = run(
        Command::new(&fio)
            .args([
                "--name=verify",
                "--ioengine=nbd",
                &format!("--uri={}", cluster.uri("vol0")),
                "--rw=randwrite",
                "--bs=4k",
                "--size=64m",
                "--iodepth=16",
                "--verify=crc32c",
                "--do_verify=1",
                "--verify_fatal=1",
                // No `*-verify.state` file left behind (it would land in the cwd).
                "--verify_state_save=0",
                "--output-format=json",
            ])
            .arg(format!("--output={}", json_path.display()))
            .current_dir(cluster.scratch()),
        CLIENT_TIMEOUT * 2,
    );
    let json = std::fs::read(&json_path).unwrap_or_default();
    assert_ok(
        &out,
        &format!("fio\n--- json ---\n{}", String::from_utf8_lossy(&json)),
    );
    let all = text(&out);
    assert!(
        !all.contains("verify: bad")
            && !all.contains("verify failed")
            && !all.contains("bad magic"),
        "fio reported verify problems:\n{all}"
    );
    let v = parse_json(&json, "fio --output-format=json");
    let job = &v["jobs"][0];
    assert_eq!(job["error"].as_i64(), Some(0), "fio job error: {job}");
    assert_eq!(
        job["write"]["io_bytes"].as_u64(),
        Some(size_bytes),
        "fio wrote all 64 MiB"
    );
    // do_verify reads every written block back and checks its crc32c header.
    assert_eq!(
        job["read"]["io_bytes"].as_u64(),
        Some(size_bytes),
        "fio verified (read back) all 64 MiB"
    );
}

/// Four qemu-io processes write distinct patterns to distinct regions at the same time;
/// every region then reads back intact and nothing else changed.
#[test]
fn concurrent_connections_distinct_regions() {
    let cluster = Cluster::start();
    let region = 4 * MIB;
    let clients = 4u64;
    let mut plans: Vec<Vec<PatternWrite>> = Vec::new();
    for i in 0..clients {
        let base = i * region;
        let p = 0x10 * (i as u8 + 1);
        plans.push(vec![
            PatternWrite {
                offset: base,
                len: MIB,
                pattern: p,
            },
            PatternWrite {
                offset: base + MIB + 512,
                len: 130_000,
                pattern: p + 1,
            },
            PatternWrite {
                offset: base + 2 * MIB - 3,
                len: 300 * KIB,
                pattern: p + 2,
            },
            PatternWrite {
                offset: base + 3 * MIB,
                len: 4096,
                pattern: p + 3,
            },
            PatternWrite {
                offset: base + 3 * MIB + 8192,
                len: 900 * KIB,
                pattern: p + 4,
            },
        ]);
    }
    // Half the clients over TCP, half over the unix socket; all running at once.
    let handles: Vec<_> = plans
        .iter()
        .enumerate()
        .map(|(i, plan)| {
            let uri = if i % 2 == 0 {
                cluster.uri("vol0")
            } else {
                cluster.unix_uri("vol0")
            };
            let cmds: Vec<String> = plan.iter().map(write_cmd).collect();
            std::thread::spawn(move || qemu_io_ok(&uri, &cmds))
        })
        .collect();
    for h in handles {
        if let Err(e) = h.join() {
            std::panic::resume_unwind(e);
        }
    }
    // Each region verified on a fresh connection, again concurrently.
    let handles: Vec<_> = plans
        .iter()
        .map(|plan| {
            let uri = cluster.uri("vol0");
            let cmds: Vec<String> = plan.iter().map(read_cmd).collect();
            std::thread::spawn(move || qemu_io_ok(&uri, &cmds))
        })
        .collect();
    for h in handles {
        if let Err(e) = h.join() {
            std::panic::resume_unwind(e);
        }
    }
    let all: Vec<PatternWrite> = plans.into_iter().flatten().collect();
    let len_mib = clients * region / MIB;
    let want = model(len_mib * MIB, &all);
    let got = read_export_prefix(
        &cluster.uri("vol0"),
        len_mib,
        &cluster.scratch().join("prefix.raw"),
    );
    assert_same_bytes(&got, &want, "regions written by 4 concurrent clients");
}

/// Four clients at once, each with many `aio_write`s in flight, write interleaved 512-byte
/// pieces of the same 4 KiB blocks and 128 KiB objects: no piece is lost (no unlocked
/// read-modify-write between connections or between requests of one connection).
#[test]
fn concurrent_sub_block_writes_to_shared_blocks() {
    let cluster = Cluster::start();
    let clients = 4u64;
    let piece = 512u64;
    let pieces_per_client = 512u64;
    // Client i owns bytes [k*2048 + i*512, +512) for every k: 4 clients share each 2 KiB,
    // so every 4 KiB block and 128 KiB object is written by all of them.
    let stride = clients * piece;
    let mut plans: Vec<Vec<PatternWrite>> = Vec::new();
    for i in 0..clients {
        let writes = (0..pieces_per_client)
            .map(|k| PatternWrite {
                // Start 1 KiB in, so pieces also straddle object boundaries' neighbourhoods.
                offset: 1024 + k * stride + i * piece,
                len: piece,
                pattern: (1 + i as u8) * 0x11 + (k % 7) as u8,
            })
            .collect();
        plans.push(writes);
    }
    let handles: Vec<_> = plans
        .iter()
        .enumerate()
        .map(|(i, plan)| {
            let uri = if i % 2 == 0 {
                cluster.uri("vol0")
            } else {
                cluster.unix_uri("vol0")
            };
            let mut cmds: Vec<String> = plan
                .iter()
                .map(|w| format!("aio_write -P 0x{:02x} {} {}", w.pattern, w.offset, w.len))
                .collect();
            cmds.push("aio_flush".to_string());
            std::thread::spawn(move || qemu_io_ok(&uri, &cmds))
        })
        .collect();
    for h in handles {
        if let Err(e) = h.join() {
            std::panic::resume_unwind(e);
        }
    }
    let all: Vec<PatternWrite> = plans.into_iter().flatten().collect();
    let len_mib = (1024 + pieces_per_client * stride).div_ceil(MIB);
    let want = model(len_mib * MIB, &all);
    let got = read_export_prefix(
        &cluster.uri("vol0"),
        len_mib,
        &cluster.scratch().join("prefix.raw"),
    );
    assert_same_bytes(&got, &want, "interleaved 512-byte pieces from 4 clients");
}

/// fio with 512-byte random writes at queue depth 32 (many sub-4 KiB writes in flight to the
/// same blocks on one connection) verifies with crc32c.
#[test]
fn fio_sub_block_randwrite_verify() {
    let fio = require_tool("fio", "fio");
    let cluster = Cluster::start();
    let json_path = cluster.scratch().join("fio.json");
    let size_bytes: u64 = 4 * MIB;
    let out = run(
        Command::new(&fio)
            .args([
                "--name=verify512",
                "--ioengine=nbd",
                &format!("--uri={}", cluster.uri("vol0")),
                "--rw=randwrite",
                "--bs=512",
                "--size=4m",
                "--iodepth=32",
                "--verify=crc32c",
                "--do_verify=1",
                "--verify_fatal=1",
                "--verify_state_save=0",
                "--output-format=json",
            ])
            .arg(format!("--output={}", json_path.display()))
            .current_dir(cluster.scratch()),
        CLIENT_TIMEOUT * 2,
    );
    let json = std::fs::read(&json_path).unwrap_or_default();
    assert_ok(
        &out,
        &format!("fio\n--- json ---\n{}", String::from_utf8_lossy(&json)),
    );
    let v = parse_json(&json, "fio --output-format=json");
    let job = &v["jobs"][0];
    assert_eq!(job["error"].as_i64(), Some(0), "fio job error: {job}");
    assert_eq!(job["write"]["io_bytes"].as_u64(), Some(size_bytes), "{job}");
    assert_eq!(job["read"]["io_bytes"].as_u64(), Some(size_bytes), "{job}");
}

/// WRITE_ZEROES (with and without "may trim"), FUA writes and unaligned trims change exactly
/// the bytes asked for: neighbours keep their data, and whole 4 KiB blocks inside a trimmed
/// range read as zeros.
#[test]
fn write_zeroes_fua_and_unaligned_trim_are_exact() {
    let cluster = Cluster::start();
    let uri = cluster.uri("vol0");
    qemu_io_ok(&uri, &["write -P 0x99 0 1M"]);
    qemu_io_ok(
        &uri,
        &[
            // Unaligned write-zeroes inside one object.
            "write -z 1000 5000",
            // Write-zeroes that may punch a hole, crossing an object boundary.
            "write -z -u 126976 8192",
            // FUA write.
            "write -f -P 0x5b 200000 3000",
            // Unaligned trim: [300100, 312100) covers 4 KiB blocks [303104, 311296) fully.
            "discard 300100 12000",
        ],
    );
    let want_len = MIB as usize;
    let got = read_export_prefix(&uri, 1, &cluster.scratch().join("z.raw"));
    assert_eq!(got.len(), want_len);
    let mut want = vec![0x99u8; want_len];
    want[1000..6000].fill(0);
    want[126_976..135_168].fill(0);
    want[200_000..203_000].fill(0x5b);
    // Trim is advisory outside whole 4 KiB blocks: those bytes may be old data or zeros.
    let (trim_start, trim_end) = (300_100usize, 312_100usize);
    let (blk_start, blk_end) = (303_104usize, 311_296usize);
    want[blk_start..blk_end].fill(0);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let advisory = (trim_start..blk_start).contains(&i) || (blk_end..trim_end).contains(&i);
        assert!(
            g == w || (advisory && (*g == 0 || *g == 0x99)),
            "byte {i}: got {g:#04x}, want {w:#04x} (advisory trim edge: {advisory})"
        );
    }
}

/// `--nbd-socket PATH` puts the unix socket there (default: DATA_DIR/nbd.sock) and serves it.
#[test]
fn unix_socket_default_and_custom_path() {
    let cluster = Cluster::start();
    assert_eq!(cluster.nbd_socket, cluster.data_dir().join("nbd.sock"));
    drop(cluster);
    let sock_dir = tempfile::tempdir().expect("tempdir");
    let path = sock_dir.path().join("custom.sock");
    let path_arg = path.to_str().expect("utf-8 path");
    let cluster = Cluster::start_with(&["--nbd-socket", path_arg]);
    assert_eq!(cluster.nbd_socket, path);
    qemu_io_ok(
        &cluster.unix_uri("vol0"),
        &["write -P 0x31 0 64k", "read -P 0x31 0 64k"],
    );
}

/// The largest requests clients send (32 MiB, the protocol's maximum block size, spanning
/// 256 objects) write and read back intact, unaligned to objects.
#[test]
fn largest_requests_32mib() {
    let cluster = Cluster::start();
    let uri = cluster.uri("vol0");
    let off = 64 * MIB + 4096;
    qemu_io_ok(
        &uri,
        &[
            format!("write -P 0xd1 {off} 32M"),
            format!("read -P 0xd1 {off} 32M"),
            format!("read -P 0 {} 4096", off - 4096),
            format!("read -P 0 {} 4096", off + 32 * MIB),
        ],
    );
}
