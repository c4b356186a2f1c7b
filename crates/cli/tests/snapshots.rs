//! Snapshots and clones on `basalt up`, driven by real clients: a snapshot taken under a
//! writer holds exactly a prefix of its acknowledged writes, fio verifies across snapshots
//! taken while it writes, clones read their parent and keep their own data, snapshots are
//! exported read-only, removals are refused while clones depend on them and free the space
//! after, and everything survives kill -9.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

fn assert_error(out: &Output, message: &str, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what} should fail:\n{}", text(out));
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("error: ") && l.contains(message)),
        "{what}: expected `error: ...{message}...`, got:\n{stderr}"
    );
}

/// Number of writes of the prefix test: 4 KiB each, written one at a time.
const PREFIX_WRITES: u64 = 12_000;

/// Goal: a snapshot taken while a client writes blocks in order, one at a time, holds
/// exactly the first k writes for some k, with every write acknowledged before the command
/// started among them and none that started after it returned.
#[test]
fn snapshot_under_a_writer_holds_a_prefix_of_acknowledged_writes() {
    // libnbd's Python binding (python3-libnbd) lives in the system Python, whatever
    // python3 comes first on PATH.
    let python = std::path::PathBuf::from("/usr/bin/python3");
    assert!(
        python.exists(),
        "/usr/bin/python3 (with python3-libnbd) is needed"
    );
    let nbdcopy = require_tool("nbdcopy", "libnbd-bin");
    let cluster = Cluster::start();
    // Block i (0-based) holds the u64 i + 1 repeated; each ack is printed as it arrives.
    let code = format!(
        "import nbd, sys\n\
         h = nbd.NBD()\n\
         h.connect_uri(sys.argv[1])\n\
         for i in range({PREFIX_WRITES}):\n\
         \x20   h.pwrite((i + 1).to_bytes(8, 'little') * 512, i * 4096)\n\
         \x20   print(i + 1, flush=True)\n\
         h.flush()\n"
    );
    let mut writer = Command::new(&python)
        .args(["-c", &code, &cluster.uri("vol0")])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the nbdsh writer");
    let acked = Arc::new(AtomicU64::new(0));
    let reader = {
        let acked = acked.clone();
        let stdout = writer.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Ok(n) = line.trim().parse::<u64>() {
                    acked.store(n, Ordering::SeqCst);
                }
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.load(Ordering::SeqCst) < 2_000 {
        assert!(Instant::now() < deadline, "the writer made no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = acked.load(Ordering::SeqCst);
    cluster.volume_ok(&["snapshot", "vol0@mid"]);
    let after = acked.load(Ordering::SeqCst);
    let status = wait_timeout(&mut writer, Duration::from_secs(300)).expect("writer finished");
    assert!(status.success(), "the writer failed: {status}");
    reader.join().expect("reader");
    assert!(
        after < PREFIX_WRITES,
        "the snapshot returned while the writer was still writing ({after} acknowledged)"
    );

    let dump = cluster.scratch().join("mid.raw");
    let uri = cluster.uri("vol0@mid");
    let out = run(
        Command::new(&nbdcopy).arg(&uri).arg(&dump),
        Duration::from_secs(300),
    );
    assert_ok(&out, "nbdcopy the snapshot");
    let bytes = std::fs::read(&dump).expect("read the snapshot copy");
    let block = |i: u64| &bytes[(i * 4096) as usize..((i + 1) * 4096) as usize];
    let expected = |i: u64| (i + 1).to_le_bytes().repeat(512);
    let k = (0..PREFIX_WRITES)
        .find(|&i| block(i) != &expected(i)[..])
        .unwrap_or(PREFIX_WRITES);
    for i in k..PREFIX_WRITES {
        assert!(
            block(i).iter().all(|b| *b == 0),
            "the snapshot holds the first {k} writes and then block {i} again: not a prefix"
        );
    }
    assert!(
        before <= k && k <= after + 1,
        "the snapshot holds {k} writes; {before} were acknowledged before the command \
         started and {after} when it returned"
    );
    eprintln!("snapshot holds {k} writes (acknowledged: {before} before, {after} after)");
    // The volume itself holds every write.
    let out = run(
        Command::new(&nbdcopy)
            .arg(cluster.uri("vol0"))
            .arg(cluster.scratch().join("head.raw")),
        Duration::from_secs(300),
    );
    assert_ok(&out, "nbdcopy the volume");
    let head = std::fs::read(cluster.scratch().join("head.raw")).expect("read the copy");
    for i in 0..PREFIX_WRITES {
        assert_eq!(
            &head[(i * 4096) as usize..((i + 1) * 4096) as usize],
            &expected(i)[..],
            "block {i} of the volume"
        );
    }
}

/// Goal: fio writing with crc32c verification at queue depth 16 sees no error while three
/// snapshots are taken under it (its gateway follows each new head), and every block
/// verifies afterwards; each snapshot is readable and stays as it was.
#[test]
fn fio_verifies_across_snapshots_taken_while_it_writes() {
    let cluster = Cluster::start();
    let fio = spawn_fio_verify(&cluster, &cluster.uri("vol0"), 48, "verify");
    let started = Instant::now();
    for i in 0..3 {
        std::thread::sleep(Duration::from_millis(700));
        cluster.volume_ok(&["snapshot", &format!("vol0@during{i}")]);
    }
    let snapshots_done = started.elapsed();
    let writing = finish_fio(&cluster, fio, "verify", 48);
    assert!(
        writing > snapshots_done,
        "fio's writes ({writing:?}) outlast the snapshots ({snapshots_done:?})"
    );
    let ls = cluster.volume_ok(&["snapshot", "ls", "vol0", "--json"]);
    let snaps: serde_json::Value = serde_json::from_str(&ls).expect("snapshot ls --json");
    assert_eq!(snaps.as_array().map(|a| a.len()), Some(3), "{ls}");
    // Snapshots are distinct, frozen and readable: two reads of each agree.
    for i in 0..3 {
        let uri = cluster.uri(&format!("vol0@during{i}"));
        let a = read_export_prefix(&uri, 48, &cluster.scratch().join("a.raw"));
        let b = read_export_prefix(&uri, 48, &cluster.scratch().join("b.raw"));
        assert_same_bytes(&a, &b, "a snapshot read twice");
    }
}

/// Goal: clones read their parent snapshot, keep their own writes apart from it and from
/// each other; a snapshot export is read-only; `volume info` shows the parent chain; the
/// commands take milliseconds.
#[test]
fn clones_read_their_snapshot_and_keep_their_own_data() {
    let cluster = Cluster::start();
    let uri = cluster.uri("vol0");
    qemu_io_ok(&uri, &["write -P 0x61 0 1M", "write -P 0x62 2M 128k"]);
    let out = cluster.volume_ok(&["snapshot", "vol0@golden"]);
    assert!(out.contains("took snapshot vol0@golden in"), "{out}");
    for clone in ["vm1", "vm2"] {
        let out = cluster.volume_ok(&["clone", "vol0@golden", clone]);
        assert!(out.contains("as a clone of vol0@golden"), "{out}");
    }
    qemu_io_ok(
        &cluster.uri("vm1"),
        &["write -P 0x71 4k 4k", "write -P 0x72 3M 4k"],
    );
    qemu_io_ok(
        &cluster.uri("vm2"),
        &["write -P 0x81 4k 4k", "discard 2M 128k"],
    );
    qemu_io_ok(&uri, &["write -P 0x91 4k 4k"]);
    qemu_io_ok(
        &cluster.uri("vm1"),
        &[
            "read -P 0x61 0 4k",
            "read -P 0x71 4k 4k",
            "read -P 0x61 8k 1016k",
            "read -P 0x62 2M 128k",
            "read -P 0x72 3M 4k",
        ],
    );
    qemu_io_ok(
        &cluster.uri("vm2"),
        &["read -P 0x81 4k 4k", "read -P 0 2M 128k", "read -P 0 3M 4k"],
    );
    qemu_io_ok(&uri, &["read -P 0x91 4k 4k", "read -P 0x62 2M 128k"]);
    let snap = cluster.uri("vol0@golden");
    qemu_io_ok(&snap, &["read -P 0x61 0 1M", "read -P 0x62 2M 128k"]);
    // Opened read-write (no -r), the export says it is read-only and QEMU refuses.
    let out = run(
        Command::new(require_tool("qemu-io", "qemu-utils"))
            .args(["-f", "raw", "-c", "write -P 1 0 4k"])
            .arg(&snap),
        Duration::from_secs(60),
    );
    assert!(
        !out.status.success() && !text(&out).contains("wrote"),
        "a snapshot export refuses writes:\n{}",
        text(&out)
    );
    qemu_io_ok(&snap, &["read -P 0x61 0 4k"]);
    // A clone of a clone.
    cluster.volume_ok(&["snapshot", "vm1@s"]);
    cluster.volume_ok(&["clone", "vm1@s", "vm1b"]);
    qemu_io_ok(
        &cluster.uri("vm1b"),
        &["read -P 0x71 4k 4k", "read -P 0x62 2M 128k"],
    );
    let info = cluster.volume_ok(&["info", "vm1b"]);
    assert!(info.contains("parent:      vm1@s"), "{info}");
    let info = cluster.volume_ok(&["info", "vol0"]);
    assert!(info.contains("golden"), "{info}");
    assert!(info.contains("created:     20"), "ISO dates: {info}");
    let names = nbd_list(&cluster.server_uri());
    for want in ["vol0", "vol0@golden", "vm1", "vm1@s", "vm1b", "vm2"] {
        assert!(names.contains(&want.to_string()), "exports {names:?}");
    }
}

/// Goal: bad snapshot and clone requests get a precise error and change nothing; removals
/// are refused while clones depend on a snapshot (naming them) and free the space after.
#[test]
fn bad_requests_and_removals() {
    let cluster = Cluster::start();
    qemu_io_ok(&cluster.uri("vol0"), &["write -P 0x33 0 8M"]);
    let empty = cluster.used_bytes();
    cluster.volume_ok(&["snapshot", "vol0@s1"]);
    let v = |args: &[&str]| cluster.volume(args);
    assert_error(&v(&["snapshot", "vol0"]), "VOLUME@SNAPSHOT", "no @");
    assert_error(
        &v(&["snapshot", "vol0@a/b"]),
        "snapshot name",
        "a / in the name",
    );
    assert_error(&v(&["snapshot", "vol0@x@y"]), "snapshot name", "two @");
    assert_error(
        &v(&["snapshot", "nope@s"]),
        "does not exist",
        "unknown volume",
    );
    assert_error(&v(&["snapshot", "vol0@s1"]), "exists", "taken twice");
    assert_error(
        &v(&["clone", "vol0@nope", "c"]),
        "no snapshot",
        "unknown snapshot",
    );
    assert_error(
        &v(&["clone", "vol0@s1", "vol0"]),
        "exists",
        "clone onto a volume",
    );
    assert_error(
        &v(&["clone", "vol0@s1", "a@b"]),
        "volume name",
        "bad clone name",
    );
    cluster.volume_ok(&["clone", "vol0@s1", "c1"]);
    assert_error(
        &v(&["resize", "c1", "512M"]),
        "can grow but not shrink",
        "shrink a clone",
    );
    assert_error(
        &v(&["resize", "vol0", "512M"]),
        "can grow but not shrink",
        "shrink",
    );
    cluster.volume_ok(&["resize", "c1", "2G"]);
    qemu_io_ok(
        &cluster.uri("c1"),
        &["read -P 0x33 0 8M", "read -P 0 1G 1M"],
    );
    assert_error(&v(&["rm", "vol0"]), "c1 (of vol0@s1)", "rm under a clone");
    qemu_io_ok(&cluster.uri("c1"), &["write -P 0x44 0 1M"]);
    // Clones may still be made after a refused removal.
    cluster.volume_ok(&["clone", "vol0@s1", "c2"]);
    cluster.volume_ok(&["rm", "c2"]);
    cluster.volume_ok(&["rm", "c1"]);
    cluster.volume_ok(&["rm", "vol0"]);
    let after = cluster.used_bytes();
    assert!(
        after < empty / 4,
        "removing the volume, its snapshot and clones freed their space: \
         {empty} bytes with 8 MiB written, {after} after"
    );
}

/// Goal: after kill -9 right after snapshots and clone writes (flushed), the restarted
/// cluster serves every layer as it was: the snapshot, the head and the clone.
#[test]
fn layers_survive_kill9() {
    let mut cluster = Cluster::start();
    qemu_io_ok(&cluster.uri("vol0"), &["write -P 0x21 0 2M"]);
    cluster.volume_ok(&["snapshot", "vol0@a"]);
    qemu_io_ok(&cluster.uri("vol0"), &["write -P 0x22 0 1M", "flush"]);
    cluster.volume_ok(&["clone", "vol0@a", "c"]);
    qemu_io_ok(&cluster.uri("c"), &["write -P 0x23 1M 4k", "flush"]);
    cluster.kill9();
    cluster.restart();
    qemu_io_ok(&cluster.uri("vol0@a"), &["read -P 0x21 0 2M"]);
    qemu_io_ok(
        &cluster.uri("vol0"),
        &["read -P 0x22 0 1M", "read -P 0x21 1M 1M"],
    );
    qemu_io_ok(
        &cluster.uri("c"),
        &[
            "read -P 0x21 0 1M",
            "read -P 0x23 1M 4k",
            "read -P 0x21 1028k 1020k",
        ],
    );
    // The frozen layer stays frozen after the restart: the head moves on as before.
    cluster.volume_ok(&["snapshot", "vol0@b"]);
    qemu_io_ok(&cluster.uri("vol0"), &["write -P 0x24 0 4k"]);
    qemu_io_ok(&cluster.uri("vol0@b"), &["read -P 0x22 0 4k"]);
}

/// Run fio (ioengine=nbd) random 4 KiB writes with crc32c verification over the first
/// `size_mib` MiB of `uri`; returns the child.
/// fio's write rate in the tests that act while it writes: unpaced, an idle machine wrote
/// 48 MiB in under a second, before the snapshot meant to land under it (a flaky
/// assertion). Paced, 48 MiB takes ~6 s whatever the machine, and the tests check that the
/// write phase outlasted what they did under it.
const PACED_WRITE_IOPS: u64 = 2000;

fn spawn_fio_verify(
    cluster: &Cluster,
    uri: &str,
    size_mib: u64,
    name: &str,
) -> std::process::Child {
    let fio = require_tool("fio", "fio");
    Command::new(&fio)
        .args([
            &format!("--name={name}"),
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randwrite",
            "--bs=4k",
            &format!("--size={size_mib}m"),
            "--iodepth=16",
            &format!("--rate_iops={PACED_WRITE_IOPS}"),
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--verify_state_save=0",
            "--output-format=json",
        ])
        .arg(format!(
            "--output={}",
            cluster.scratch().join(format!("{name}.json")).display()
        ))
        .current_dir(cluster.scratch())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start fio")
}

/// Wait for a fio started by `spawn_fio_verify` and assert it verified everything; returns
/// how long its write phase ran.
fn finish_fio(
    cluster: &Cluster,
    mut child: std::process::Child,
    name: &str,
    size_mib: u64,
) -> Duration {
    let status = wait_timeout(&mut child, Duration::from_secs(600)).expect("fio finished");
    let json = std::fs::read(cluster.scratch().join(format!("{name}.json"))).unwrap_or_default();
    assert!(
        status.success(),
        "fio {name}: {status}\n{}",
        String::from_utf8_lossy(&json)
    );
    let v = parse_json(&json, "fio json");
    let job = &v["jobs"][0];
    assert_eq!(job["error"].as_i64(), Some(0), "fio job error: {job}");
    assert_eq!(
        job["read"]["io_bytes"].as_u64(),
        Some(size_mib * MIB),
        "all verified"
    );
    Duration::from_millis(job["write"]["runtime"].as_u64().unwrap_or(0))
}

/// Goal: a snapshot taken while fio writes is restored byte for byte by a rollback; then
/// removing it (its data merged into the volume) leaves the volume's bytes unchanged.
#[test]
fn rollback_restores_a_snapshot_taken_under_fio_byte_for_byte() {
    let nbdcopy = require_tool("nbdcopy", "libnbd-bin");
    let cluster = Cluster::start();
    let fio = spawn_fio_verify(&cluster, &cluster.uri("vol0"), 48, "before");
    std::thread::sleep(Duration::from_millis(1500));
    cluster.volume_ok(&["snapshot", "vol0@mid"]);
    let writing = finish_fio(&cluster, fio, "before", 48);
    let snap = read_export_prefix(
        &cluster.uri("vol0@mid"),
        48,
        &cluster.scratch().join("s.raw"),
    );
    let head = read_export_prefix(&cluster.uri("vol0"), 48, &cluster.scratch().join("h.raw"));
    assert_ne!(
        snap, head,
        "fio went on writing after the snapshot (its write phase ran {writing:?})"
    );
    let out = cluster.volume_ok(&["rollback", "vol0@mid"]);
    assert!(
        out.contains("rolled volume \"vol0\" back to vol0@mid"),
        "{out}"
    );
    let back = read_export_prefix(&cluster.uri("vol0"), 48, &cluster.scratch().join("b.raw"));
    assert_same_bytes(&back, &snap, "the volume after rollback");
    let out = cluster.volume_ok(&["snapshot", "rm", "vol0@mid"]);
    assert!(out.contains("removed snapshot vol0@mid"), "{out}");
    let after = read_export_prefix(&cluster.uri("vol0"), 48, &cluster.scratch().join("a.raw"));
    assert_same_bytes(
        &after,
        &snap,
        "the volume after its snapshot was merged and removed",
    );
    let names = nbd_list(&cluster.server_uri());
    assert!(!names.iter().any(|n| n.contains('@')), "{names:?}");
    let out = run(
        Command::new(&nbdcopy)
            .arg(cluster.uri("vol0@mid"))
            .arg(cluster.scratch().join("gone.raw")),
        Duration::from_secs(60),
    );
    assert!(
        !out.status.success(),
        "a removed snapshot is no longer exported"
    );
}

/// Goal: a clone flattened while fio writes to it with verification loses nothing; after
/// the flatten its parent snapshot can be removed and the clone still reads the parent's
/// data it never overwrote; a flatten interrupted by kill -9 completes when run again.
#[test]
fn flatten_under_load_then_the_parent_goes() {
    let mut cluster = Cluster::start();
    qemu_io_ok(&cluster.uri("vol0"), &["write -P 0x5e 0 64M"]);
    cluster.volume_ok(&["snapshot", "vol0@gold"]);
    cluster.volume_ok(&["clone", "vol0@gold", "vm"]);
    let fio = spawn_fio_verify(&cluster, &cluster.uri("vm"), 32, "clone");
    let flatten_at = Duration::from_millis(500);
    std::thread::sleep(flatten_at);
    let out = cluster.volume_ok(&["flatten", "vm"]);
    assert!(out.contains("flattened volume \"vm\""), "{out}");
    let writing = finish_fio(&cluster, fio, "clone", 32);
    assert!(
        writing > flatten_at,
        "fio's writes ({writing:?}) were still running when the flatten began"
    );
    let info = cluster.volume_ok(&["info", "vm"]);
    assert!(info.contains("parent:      none"), "{info}");
    cluster.volume_ok(&["snapshot", "rm", "vol0@gold"]);
    qemu_io_ok(&cluster.uri("vm"), &["read -P 0x5e 32M 32M"]);
    qemu_io_ok(&cluster.uri("vol0"), &["read -P 0x5e 0 64M"]);

    // kill -9 in the middle of a flatten (after its first progress report, before it
    // ends), then run it again.
    cluster.volume_ok(&["snapshot", "vol0@g2"]);
    cluster.volume_ok(&["clone", "vol0@g2", "vm2"]);
    let mut flatten = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args([
            "volume",
            "--control",
            &cluster.control.to_string(),
            "flatten",
            "vm2",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start flatten");
    let progress = first_line_starting(
        flatten.stderr.take().expect("piped stderr"),
        "flattening vm2: ",
        Duration::from_secs(60),
    );
    let running = flatten.try_wait().expect("poll flatten").is_none();
    cluster.kill9();
    let _ = flatten.kill();
    let out = flatten
        .wait_with_output()
        .expect("collect flatten's output");
    assert!(
        progress.is_some() && running,
        "the flatten was under way when the daemon was killed: first progress line \
         {progress:?}, still running {running}, stdout {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    cluster.restart();
    let info = cluster.volume_ok(&["info", "vm2"]);
    assert!(
        info.contains("parent:      vol0@g2"),
        "the killed flatten had not finished: {info}"
    );
    let again = cluster.volume(&["flatten", "vm2"]);
    let all = text(&again);
    assert!(
        again.status.success() || all.contains("no parent"),
        "flatten after the crash: {all}"
    );
    cluster.volume_ok(&["snapshot", "rm", "vol0@g2"]);
    qemu_io_ok(&cluster.uri("vm2"), &["read -P 0x5e 0 64M"]);
}

/// The first line of `stream` starting with `prefix`, read within `timeout` (`None` if the
/// stream ends or the time passes first); the rest of the stream is drained in the background.
fn first_line_starting(
    stream: impl std::io::Read + Send + 'static,
    prefix: &str,
    timeout: Duration,
) -> Option<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let prefix = prefix.to_string();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            if !sent && line.starts_with(&prefix) {
                sent = true;
                let _ = tx.send(line);
            }
        }
    });
    rx.recv_timeout(timeout).ok()
}

/// `volume info --json` usage: (head bytes, [snapshot bytes]).
fn usage(cluster: &Cluster, name: &str) -> (u64, Vec<u64>) {
    let out = cluster.volume_ok(&["info", name, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("info --json");
    let u = &v["usage"];
    let head = u["head"]["bytes"].as_u64().expect("head bytes");
    let snaps = u["snapshots"]
        .as_array()
        .expect("snapshots")
        .iter()
        .map(|s| s[1]["bytes"].as_u64().expect("snapshot bytes"))
        .collect();
    (head, snaps)
}

/// Goal: `volume info` reports what each layer holds: a snapshot keeps what was written
/// before it, the head what came after (whole objects copied up), a fresh clone nothing of
/// its own; removing the snapshot moves what the head still reads into it; `volume ls`,
/// `image ls` and `status` show the same accounting.
#[test]
fn usage_per_layer() {
    const OBJ: u64 = 128 << 10;
    let cluster = Cluster::start();
    qemu_io_ok(&cluster.uri("vol0"), &["write -P 1 0 8M"]);
    assert_eq!(usage(&cluster, "vol0"), (8 * MIB, vec![]));
    cluster.volume_ok(&["snapshot", "vol0@s"]);
    assert_eq!(usage(&cluster, "vol0"), (0, vec![8 * MIB]));
    // 4 KiB into each of 4 objects: 4 whole objects copied up.
    qemu_io_ok(
        &cluster.uri("vol0"),
        &[
            "write -P 2 0 4k",
            "write -P 2 128k 4k",
            "write -P 2 256k 4k",
            "write -P 2 384k 4k",
        ],
    );
    assert_eq!(usage(&cluster, "vol0"), (4 * OBJ, vec![8 * MIB]));
    cluster.volume_ok(&["clone", "vol0@s", "c"]);
    assert_eq!(usage(&cluster, "c"), (0, vec![]));
    qemu_io_ok(&cluster.uri("c"), &["write -P 3 1M 4k"]);
    assert_eq!(usage(&cluster, "c"), (OBJ, vec![]));
    let ls = cluster.volume_ok(&["ls"]);
    assert!(
        ls.lines()
            .any(|l| l.starts_with("c ") && l.contains("128.0 KiB") && l.contains("vol0@s")),
        "{ls}"
    );
    let status = cluster.status_text();
    assert!(
        status.contains("2 volumes") || status.contains("volumes: 2"),
        "{status}"
    );
    assert!(status.contains("1 snapshots"), "{status}");
    cluster.volume_ok(&["rm", "c"]);
    cluster.volume_ok(&["snapshot", "rm", "vol0@s"]);
    assert_eq!(usage(&cluster, "vol0"), (8 * MIB, vec![]));
    qemu_io_ok(
        &cluster.uri("vol0"),
        &[
            "read -P 2 0 4k",
            "read -P 1 4k 124k",
            "read -P 1 512k 7680k",
        ],
    );
}
