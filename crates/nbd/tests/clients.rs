//! End-to-end tests with the real NBD clients: nbdinfo, nbdcopy and nbdsh (libnbd),
//! qemu-io and qemu-img (qemu), and fio's nbd engine, against the in-process server.

mod common;

use std::io::Write;
use std::sync::Arc;

use basalt_nbd::MemDevice;
use common::{run_ok, tool, TestServer};

const MIB: u64 = 1 << 20;

/// The value after `key:` on nbdinfo's text output.
fn field<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("nbdinfo output lacks {key}:\n{out}"))
        .trim()
}

#[test]
fn nbdinfo_lists_and_describes_exports() {
    // Goal: nbdinfo --list sees every export (added at runtime too) with its description,
    // and nbdinfo on one export reports size, features and block size constraints.
    let t = TestServer::start();
    t.add_mem("alpha", 64 * MIB);
    t.add("ro", Arc::new(MemDevice::read_only_with(8 * MIB, b"x")));
    let list = run_ok(tool("nbdinfo").args(["--list", &t.uri("")]));
    assert!(list.contains("export=\"alpha\""), "{list}");
    assert!(list.contains("description: test export alpha"), "{list}");
    assert!(list.contains("export=\"ro\""), "{list}");
    t.add_mem("late", MIB);
    let list = run_ok(tool("nbdinfo").args(["--list", &t.uri("")]));
    assert!(
        list.contains("export=\"late\""),
        "new exports show at once:\n{list}"
    );

    let info = run_ok(tool("nbdinfo").arg(t.uri("alpha")));
    assert!(info.contains("using structured"), "{info}");
    assert_eq!(field(&info, "export-size"), "67108864 (64M)");
    for yes in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_cache",
        "can_multi_conn",
    ] {
        assert_eq!(field(&info, yes), "true", "{yes}");
    }
    assert_eq!(field(&info, "is_read_only"), "false");
    assert_eq!(field(&info, "block_size_minimum"), "1");
    assert_eq!(field(&info, "block_size_preferred"), "4096");
    assert_eq!(field(&info, "block_size_maximum"), "33554432");
    assert!(info.contains("base:allocation"), "{info}");

    let ro = run_ok(tool("nbdinfo").arg(t.unix_uri("ro")));
    assert_eq!(field(&ro, "is_read_only"), "true");
    assert_eq!(field(&ro, "can_trim"), "false");
}

#[test]
fn qemu_io_pattern_roundtrip_over_tcp_and_unix() {
    // Goal: qemu-io pattern writes read back verified, over TCP and the unix socket, and
    // zeroing/discard read back as zeroes; a write to a read-only export fails.
    let t = TestServer::start();
    t.add_mem("disk", 16 * MIB);
    t.add("ro", Arc::new(MemDevice::read_only_with(MIB, b"x")));
    let tcp = run_ok(tool("qemu-io").args(["-f", "raw"]).args([
        "-c",
        "write -P 0xab 0 1M",
        "-c",
        "read -P 0xab 0 1M",
        "-c",
        "write -P 0x5a 1536k 12345",
        "-c",
        "aio_write -P 0x11 4M 64k",
        "-c",
        "aio_write -P 0x22 5M 64k",
        "-c",
        "aio_flush",
        "-c",
        "write -z 4M 64k",
        "-c",
        "discard 5M 64k",
        "-c",
        "flush",
        &t.uri("disk"),
    ]));
    assert!(!tcp.contains("fail"), "{tcp}");
    let unix = run_ok(tool("qemu-io").args(["-f", "raw"]).args([
        "-c",
        "read -P 0xab 0 1M",
        "-c",
        "read -P 0x5a 1536k 12345",
        "-c",
        "read -P 0 4M 64k",
        "-c",
        "read -P 0 5M 64k",
        &t.unix_uri("disk"),
    ]));
    assert!(!unix.contains("fail"), "{unix}");
    assert_eq!(unix.matches("read ").count(), 4, "{unix}");

    let out = tool("qemu-io")
        .args(["-f", "raw", "-c", "write -P 1 0 4k", &t.uri("ro")])
        .output()
        .expect("run qemu-io");
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("failed") || !out.status.success(),
        "write to ro must fail: {text}"
    );
}

#[test]
fn nbdinfo_map_shows_holes_after_trim() {
    // Goal: base:allocation reports data where written, a hole after TRIM, and an
    // allocated-zero extent after a NO_HOLE zero write.
    let t = TestServer::start();
    t.add_mem("map", 8 * MIB);
    run_ok(tool("qemu-io").args(["-f", "raw"]).args([
        "-c",
        "write -P 7 0 4M",
        "-c",
        "discard 1M 1M",
        "-c",
        "write -z 2M 1M",
        &t.uri("map"),
    ]));
    let map = run_ok(tool("nbdinfo").args(["--map", &t.uri("map")]));
    let rows: Vec<Vec<&str>> = map
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let expect = [
        ["0", "1048576", "0", "data"],
        ["1048576", "1048576", "3", "hole,zero"],
        ["2097152", "1048576", "2", "zero"],
        ["3145728", "1048576", "0", "data"],
        ["4194304", "4194304", "3", "hole,zero"],
    ];
    assert_eq!(rows, expect.map(|r| r.to_vec()).to_vec(), "{map}");
    let qmap = run_ok(tool("qemu-img").args(["map", "--output=json", &t.uri("map")]));
    assert!(qmap.contains("\"zero\": true"), "{qmap}");
}

#[test]
fn nbdcopy_roundtrip_is_byte_exact() {
    // Goal: nbdcopy (several connections, thanks to CAN_MULTI_CONN) copies a random file in
    // and back out byte for byte; the unused tail stays sparse.
    let t = TestServer::start();
    let dev = t.add_mem("copy", 24 * MIB);
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("src.bin");
    let dst = dir.path().join("dst.bin");
    let mut data = vec![0u8; 20 * MIB as usize + 12345];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in data.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::File::create(&src)
        .and_then(|mut f| f.write_all(&data))
        .expect("write src");
    run_ok(tool("nbdcopy").args([src.to_str().unwrap(), &t.uri("copy")]));
    run_ok(tool("nbdcopy").args([&t.uri("copy"), dst.to_str().unwrap()]));
    let back = std::fs::read(&dst).expect("read dst");
    assert_eq!(back.len() as u64, 24 * MIB);
    assert!(back[..data.len()] == data[..], "copied data differs");
    assert!(back[data.len()..].iter().all(|&b| b == 0));
    assert!(
        dev.allocated_bytes() <= 21 * MIB,
        "tail must stay unallocated"
    );
}

#[test]
fn nbdsh_exercises_every_command_and_error_path() {
    // Goal: through libnbd, FUA writes, flush, zero (with and without NO_HOLE, FAST_ZERO),
    // cache, trim and block status (with REQ_ONE) behave, and out-of-range, oversized and
    // bad-flag requests fail with the right errno while the connection keeps working.
    let t = TestServer::start();
    let dev = t.add_mem("sh", 4 * MIB);
    let script = r#"
import errno
h.set_strict_mode(0)
size = h.get_size()
assert size == 4 << 20, size
assert h.can_meta_context("base:allocation")
assert h.get_structured_replies_negotiated()
K = 65536

def fails(errname, fn, *args):
    try:
        fn(*args)
    except nbd.Error as e:
        assert e.errno == errname, (e.errno, e.string)
        return
    raise AssertionError("expected %s" % errname)

h.pwrite(b"\xaa" * (8 * K), 0, nbd.CMD_FLAG_FUA)
h.flush()
assert h.pread(8 * K, 0) == b"\xaa" * (8 * K)
h.zero(2 * K, 0)                              # may punch a hole
h.zero(2 * K, 2 * K, nbd.CMD_FLAG_NO_HOLE)    # must stay allocated
h.zero(K, 6 * K, nbd.CMD_FLAG_FAST_ZERO)
h.cache(K, 0)
h.trim(K, 4 * K, nbd.CMD_FLAG_FUA)
assert h.pread(5 * K, 0) == b"\0" * (5 * K)
assert h.pread(3 * K, 5 * K) == b"\xaa" * K + b"\0" * K + b"\xaa" * K

ents = []
def cb(meta, off, e, err):
    assert meta == "base:allocation"
    ents.append((off, list(e)))
h.block_status(8 * K, 0, cb)
assert ents == [(0, [2 * K, 3, 2 * K, 2, K, 3, K, 0, K, 3, K, 0])], ents
ents.clear()
h.block_status(8 * K, 0, cb, nbd.CMD_FLAG_REQ_ONE)
assert ents == [(0, [2 * K, 3])], ents

fails("EINVAL", h.pread, 512, size - 256)
fails("ENOSPC", h.pwrite, b"x" * 512, size - 256)
fails("EINVAL", h.pread, 64 << 20, 0)
fails("EINVAL", h.pread, 512, 0, 1 << 9)
fails("EINVAL", h.block_status, 512, size, cb)
fails("EINVAL", h.trim, 512, size)
h.pwrite(b"still alive", 100)
assert h.pread(11, 100) == b"still alive"
h.shutdown()
"#;
    run_ok(tool("nbdsh").args(["--base-allocation", "-u", &t.uri("sh"), "-c", script]));
    assert!(dev.flush_count() >= 1, "FLUSH reached the device");
    assert!(dev.fua_count() >= 2, "FUA reached the device");
}

#[test]
fn fio_nbd_engine_verifies_crc32c() {
    // Goal: fio's nbd engine writes random 4k blocks at queue depth 16 and verifies every
    // block's crc32c on read-back, with no errors.
    let t = TestServer::start();
    t.add_mem("fio", 32 * MIB);
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("fio.json");
    // Run inside the temp dir with state saving off: fio would leave verify state files.
    run_ok(tool("fio").current_dir(dir.path()).args([
        "--name=verify",
        "--verify_state_save=0",
        "--ioengine=nbd",
        &format!("--uri={}", t.uri("fio")),
        "--rw=randwrite",
        "--bs=4k",
        "--size=16m",
        "--iodepth=16",
        "--verify=crc32c",
        "--do_verify=1",
        "--output-format=json",
        &format!("--output={}", json.display()),
    ]));
    let report = std::fs::read_to_string(&json).expect("fio report");
    assert!(report.contains("\"error\" : 0"), "{report}");
    assert!(report.contains("\"io_bytes\" : 16777216"), "{report}");
    assert!(!report.contains("verify failed"), "{report}");
}

#[test]
fn concurrent_clients_write_disjoint_regions() {
    // Goal: several clients at once, on TCP and unix sockets and two exports, each write
    // their own region; every region then reads back with its own pattern, and the other
    // export is untouched.
    let t = TestServer::start();
    t.add_mem("shared", 16 * MIB);
    t.add_mem("other", 16 * MIB);
    let uris: Vec<String> = (0..6)
        .map(|i| {
            if i % 2 == 0 {
                t.uri("shared")
            } else {
                t.unix_uri("shared")
            }
        })
        .collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = uris
            .iter()
            .enumerate()
            .map(|(i, uri)| {
                s.spawn(move || {
                    let w = format!("write -P {} {}M 2M", 0x10 + i, 2 * i);
                    run_ok(tool("qemu-io").args(["-f", "raw", "-c", &w, uri]))
                })
            })
            .collect();
        for h in handles {
            h.join().expect("client thread");
        }
    });
    let mut args = vec!["-f".to_string(), "raw".into()];
    for i in 0..6 {
        args.push("-c".into());
        args.push(format!("read -P {} {}M 2M", 0x10 + i, 2 * i));
    }
    args.push(t.uri("shared"));
    let out = run_ok(tool("qemu-io").args(&args));
    assert!(!out.contains("fail"), "{out}");
    let other =
        run_ok(tool("qemu-io").args(["-f", "raw", "-c", "read -P 0 0 12M", &t.uri("other")]));
    assert!(!other.contains("fail"), "{other}");
}
