//! Durability across restarts of `basalt up` on the same data directory: after a clean
//! SIGTERM stop, and after a crash (SIGKILL) once the client's writes were flushed.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::process::Command;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// Pattern writes (aligned, unaligned, across objects) in vol0 and in a second volume.
fn pattern_cmds() -> Vec<(u8, u64, u64)> {
    vec![
        (0xa1, 0, MIB),
        (0xa2, 3 * MIB + 512, 70_000),
        (0xa3, 10 * 128 * KIB - 1000, 2000),
        (0xa4, 20 * MIB - 4096, 640 * KIB),
    ]
}

fn writes() -> Vec<String> {
    pattern_cmds()
        .into_iter()
        .map(|(p, off, len)| format!("write -P 0x{p:02x} {off} {len}"))
        .collect()
}

fn reads() -> Vec<String> {
    pattern_cmds()
        .into_iter()
        .map(|(p, off, len)| format!("read -P 0x{p:02x} {off} {len}"))
        .collect()
}

/// Write random data into the first `len_mib` MiB of `uri` with `qemu-img convert -n`
/// (which flushes before it exits); returns the data.
fn write_random(cluster: &Cluster, uri: &str, seed: u64, len_mib: u64) -> Vec<u8> {
    let qemu_img = require_tool("qemu-img", "qemu-utils");
    let data = pseudo_random(seed, (len_mib * MIB) as usize);
    let src = cluster.scratch().join(format!("random-{seed}.raw"));
    std::fs::write(&src, &data).expect("write random source");
    let out = run(
        Command::new(qemu_img)
            .args(["convert", "-n", "-f", "raw", "-O", "raw"])
            .arg(&src)
            .arg(uri),
        CLIENT_TIMEOUT,
    );
    assert_ok(&out, &format!("qemu-img convert -n into {uri}"));
    data
}

/// A clean stop (SIGTERM, exit 0) and restart keeps the volumes, their sizes and their data.
#[test]
fn clean_stop_and_restart_keeps_volumes_and_data() {
    let mut cluster = Cluster::start();
    cluster.volume_ok(&["create", "keep", "--size", "16M"]);
    qemu_io_ok(&cluster.uri("vol0"), &writes());
    let random = write_random(&cluster, &cluster.uri("keep"), 7, 16);

    cluster.stop();
    cluster.restart();

    let ls = cluster.volume_ok(&["ls", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&ls).expect("ls --json is JSON");
    let mut sizes: Vec<(String, u64)> = v
        .as_array()
        .expect("ls --json is an array")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().expect("name").to_string(),
                e["size"].as_u64().expect("size"),
            )
        })
        .collect();
    sizes.sort();
    assert_eq!(
        sizes,
        vec![
            ("keep".to_string(), 16 * MIB),
            ("vol0".to_string(), VOL0_BYTES)
        ],
        "volumes after restart"
    );
    qemu_io_ok(&cluster.uri("vol0"), &reads());
    let back = read_export_prefix(
        &cluster.uri("keep"),
        16,
        &cluster.scratch().join("keep.raw"),
    );
    assert_same_bytes(&back, &random, "volume keep after a clean restart");
    // Still writable after the restart, and a second clean stop works too.
    qemu_io_ok(
        &cluster.uri("vol0"),
        &["write -P 0xee 5M 4k", "read -P 0xee 5M 4k"],
    );
    cluster.stop();
}

/// After writes a client has flushed, a SIGKILL of the daemon loses nothing: the restarted
/// cluster serves the same bytes.
#[test]
fn kill9_after_flushed_writes_keeps_data() {
    let mut cluster = Cluster::start();
    // qemu-io flushes when it closes the image; `flush` makes it explicit.
    let mut cmds = writes();
    cmds.push("flush".to_string());
    qemu_io_ok(&cluster.uri("vol0"), &cmds);
    let random = write_random(&cluster, &cluster.unix_uri("vol0"), 99, 8);
    // The random data overwrote the first 8 MiB; the later patterns are above it.
    cluster.kill9();
    cluster.restart();
    let back = read_export_prefix(&cluster.uri("vol0"), 8, &cluster.scratch().join("vol0.raw"));
    assert_same_bytes(&back, &random, "first 8 MiB of vol0 after kill -9");
    let later: Vec<String> = reads()
        .into_iter()
        .zip(pattern_cmds())
        .filter(|(_, (_, off, _))| *off >= 8 * MIB)
        .map(|(r, _)| r)
        .collect();
    assert!(!later.is_empty(), "some patterns lie above the random data");
    qemu_io_ok(&cluster.uri("vol0"), &later);
    cluster.stop();
}

/// SIGINT (Ctrl-C) stops the cluster as cleanly as SIGTERM (exit 0, "stopped cleanly"), and
/// the data survives the restart.
#[test]
fn sigint_stops_cleanly() {
    let mut cluster = Cluster::start();
    qemu_io_ok(&cluster.uri("vol0"), &["write -P 0x1c 0 256k"]);
    let status = cluster.signal_and_wait("INT");
    let stderr = cluster.stderr_text();
    assert!(status.success(), "exit after SIGINT: {status}\n{stderr}");
    assert!(
        stderr.contains("basalt: stopped cleanly"),
        "no \"basalt: stopped cleanly\" after SIGINT:\n{stderr}"
    );
    cluster.restart();
    qemu_io_ok(&cluster.uri("vol0"), &["read -P 0x1c 0 256k"]);
}

/// A clean stop while a client is still connected (and never flushed) finishes promptly,
/// and the writes the server acknowledged to that client are durable after the restart.
#[test]
fn clean_stop_with_connected_client_keeps_acknowledged_writes() {
    let mut cluster = Cluster::start();
    let mut client = QemuIoSession::open(&cluster.uri("vol0"));
    let writes = [
        (0x4au8, 0u64),
        (0x4b, 3 * MIB + 4096),
        (0x4c, 9 * MIB - 8192),
    ];
    for (p, off) in writes {
        let r = client.cmd(&format!("write -P 0x{p:02x} {off} 64k"));
        assert!(r.starts_with("wrote 65536/65536"), "qemu-io write: {r}");
    }
    // The client is still connected: stop the cluster under it.
    cluster.stop();
    drop(client);
    cluster.restart();
    let reads: Vec<String> = writes
        .iter()
        .map(|(p, off)| format!("read -P 0x{p:02x} {off} 64k"))
        .collect();
    qemu_io_ok(&cluster.uri("vol0"), &reads);
}

/// Repeated crashes (SIGKILL) in the middle of a random-write load: every restart comes up,
/// and data flushed before the load is intact each time.
#[test]
fn kill9_under_write_load_then_restart_keeps_flushed_data() {
    let fio = require_tool("fio", "fio");
    let mut cluster = Cluster::start();
    // Flushed data in the first 4 MiB; the load writes only to [16 MiB, 48 MiB).
    qemu_io_ok(
        &cluster.uri("vol0"),
        &["write -P 0x3e 0 4M", "write -P 0x3f 100M 1M"],
    );
    for cycle in 0..2 {
        let json = cluster.scratch().join(format!("fio-{cycle}.json"));
        let mut load = std::process::Command::new(&fio)
            .args([
                "--name=load",
                "--ioengine=nbd",
                &format!("--uri={}", cluster.uri("vol0")),
                "--rw=randwrite",
                "--bs=16k",
                "--offset=16m",
                "--size=32m",
                "--iodepth=16",
                "--time_based",
                "--runtime=30",
                "--output-format=json",
            ])
            .arg(format!("--output={}", json.display()))
            .current_dir(cluster.scratch())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn fio");
        std::thread::sleep(std::time::Duration::from_secs(2));
        let running = load.try_wait().expect("poll fio").is_none();
        cluster.kill9();
        if wait_timeout(&mut load, std::time::Duration::from_secs(30)).is_none() {
            let _ = load.kill();
            let _ = load.wait();
        }
        assert!(running, "fio load ended before the crash (cycle {cycle})");
        cluster.restart();
        qemu_io_ok(
            &cluster.uri("vol0"),
            &["read -P 0x3e 0 4M", "read -P 0x3f 100M 1M"],
        );
    }
    // After the crashes the volume is fully usable: write and read a region of the load.
    qemu_io_ok(
        &cluster.uri("vol0"),
        &["write -P 0x40 20M 1M", "read -P 0x40 20M 1M"],
    );
    cluster.stop();
}

/// SIGTERM under a running write load still stops cleanly and promptly (in-flight requests
/// finish, stores close, exit 0), and the cluster restarts with its flushed data.
#[test]
fn clean_stop_under_write_load() {
    let fio = require_tool("fio", "fio");
    let mut cluster = Cluster::start();
    qemu_io_ok(&cluster.uri("vol0"), &["write -P 0x2d 0 2M"]);
    let json = cluster.scratch().join("fio.json");
    let mut load = std::process::Command::new(&fio)
        .args([
            "--name=load",
            "--ioengine=nbd",
            &format!("--uri={}", cluster.uri("vol0")),
            "--rw=randwrite",
            "--bs=4k",
            "--offset=16m",
            "--size=32m",
            "--iodepth=32",
            "--time_based",
            "--runtime=30",
            "--output-format=json",
        ])
        .arg(format!("--output={}", json.display()))
        .current_dir(cluster.scratch())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn fio");
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(
        load.try_wait().expect("poll fio").is_none(),
        "fio ended early"
    );
    let stopping = std::time::Instant::now();
    cluster.stop();
    let took = stopping.elapsed();
    if wait_timeout(&mut load, std::time::Duration::from_secs(30)).is_none() {
        let _ = load.kill();
        let _ = load.wait();
    }
    assert!(
        took < std::time::Duration::from_secs(15),
        "clean stop under load took {took:?}"
    );
    cluster.restart();
    qemu_io_ok(&cluster.uri("vol0"), &["read -P 0x2d 0 2M"]);
    cluster.stop();
}

/// A write acknowledged with FUA is durable at once: it survives a SIGKILL of the daemon
/// while the client is still connected and never sent a FLUSH.
#[test]
fn fua_write_survives_kill9() {
    let mut cluster = Cluster::start();
    let mut client = QemuIoSession::open(&cluster.uri("vol0"));
    for (p, off) in [(0x71u8, 0u64), (0x72, 5 * MIB + 512)] {
        let r = client.cmd(&format!("write -f -P 0x{p:02x} {off} 64k"));
        assert!(r.starts_with("wrote 65536/65536"), "FUA write: {r}");
    }
    cluster.kill9();
    drop(client);
    cluster.restart();
    qemu_io_ok(
        &cluster.uri("vol0"),
        &[
            "read -P 0x71 0 64k",
            format!("read -P 0x72 {} 64k", 5 * MIB + 512).as_str(),
        ],
    );
}

/// CAN_MULTI_CONN: a FLUSH on one connection makes the writes acknowledged on another
/// connection durable; they survive a SIGKILL while the writer is still connected.
#[test]
fn flush_on_other_connection_covers_writes_kill9() {
    let mut cluster = Cluster::start();
    let mut writer = QemuIoSession::open(&cluster.uri("vol0"));
    for (p, off) in [(0x81u8, MIB), (0x82, 7 * MIB + 4096)] {
        let r = writer.cmd(&format!("write -P 0x{p:02x} {off} 64k"));
        assert!(r.starts_with("wrote 65536/65536"), "write: {r}");
    }
    // A second connection only flushes (qemu-io also flushes when it closes).
    qemu_io_ok(&cluster.unix_uri("vol0"), &["flush"]);
    cluster.kill9();
    drop(writer);
    cluster.restart();
    qemu_io_ok(
        &cluster.uri("vol0"),
        &[
            format!("read -P 0x81 {} 64k", MIB),
            format!("read -P 0x82 {} 64k", 7 * MIB + 4096),
        ],
    );
}

/// `--default-volume NAME --default-volume-size SIZE` creates that volume on the first start
/// only (the banner names it); stdout carries only the banner, logs go to stderr.
#[test]
fn custom_default_volume_created_once_and_banner_on_stdout() {
    let mut cluster =
        Cluster::start_with(&["--default-volume", "data", "--default-volume-size", "64M"]);
    let out = cluster.stdout_text();
    assert!(
        out.contains(&format!("nbd://{}/data", cluster.nbd_addr)),
        "banner:\n{out}"
    );
    assert!(out.contains("nbd+unix:///data?socket="), "banner:\n{out}");
    for line in out.lines() {
        assert!(
            !["INFO", "WARN", "ERROR", "DEBUG", "basalt_"]
                .iter()
                .any(|w| line.contains(w)),
            "a log line on stdout: {line:?}\n{out}"
        );
    }
    let ls = cluster.volume_ok(&["ls", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&ls).expect("ls --json");
    let names: Vec<(String, u64)> = v
        .as_array()
        .expect("array")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().expect("name").to_string(),
                e["size"].as_u64().expect("size"),
            )
        })
        .collect();
    assert_eq!(
        names,
        vec![("data".to_string(), 64 * MIB)],
        "volumes on first start"
    );
    assert_eq!(nbd_size(&cluster.uri("data")), 64 * MIB);
    qemu_io_ok(&cluster.uri("data"), &["write -P 0x64 60M 1M"]);
    // The user removes the default volume; a restart must not create it again.
    cluster.volume_ok(&["create", "other", "--size", "8M"]);
    cluster.volume_ok(&["rm", "data"]);
    cluster.stop();
    cluster.restart();
    let ls = cluster.volume_ok(&["ls", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&ls).expect("ls --json");
    let names: Vec<&str> = v
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(
        names,
        vec!["other"],
        "volumes after restart: the default is not recreated"
    );
    cluster.stop();
}

/// A second `basalt up` on a data directory in use fails at once with an error (it must not
/// open the same store files twice), and the running cluster is undisturbed.
#[test]
fn second_instance_on_same_data_dir_is_refused() {
    let mut cluster = Cluster::start();
    qemu_io_ok(&cluster.uri("vol0"), &["write -P 0x2f 0 64k"]);
    let out = run(
        std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
            .arg("up")
            .arg("--data-dir")
            .arg(cluster.data_dir())
            .args([
                "--nbd-listen",
                "127.0.0.1:0",
                "--control-socket",
                cluster
                    .scratch()
                    .join("second-control.sock")
                    .to_str()
                    .unwrap(),
                "--s3-listen",
                "127.0.0.1:0",
            ])
            .args(["--nbd-socket"])
            .arg(cluster.scratch().join("second.sock"))
            .args(["--osd-size", OSD_SIZE]),
        std::time::Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "second instance exited {}:\n{stderr}",
        out.status
    );
    assert!(
        stderr.lines().any(|l| l.starts_with("error: ")),
        "no `error: ...` line from the second instance:\n{stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("Press Ctrl-C to stop."),
        "the second instance claimed to be up"
    );
    // The first instance still serves, its volumes unchanged, and stops cleanly.
    qemu_io_ok(&cluster.uri("vol0"), &["read -P 0x2f 0 64k"]);
    cluster.volume_ok(&["create", "after", "--size", "4M"]);
    cluster.stop();
    cluster.restart();
    let ls = cluster.volume_ok(&["ls", "--json"]);
    assert!(
        ls.contains("\"after\""),
        "volume created after the refused start: {ls}"
    );
    qemu_io_ok(&cluster.uri("vol0"), &["read -P 0x2f 0 64k"]);
}

/// Losing one OSD's store file (one replica of three) never turns into wrong data: after a
/// restart the cluster either refuses to start with an error, or serves the data from the
/// surviving replicas. Serving zeros for acknowledged, flushed data is data loss.
#[test]
fn lost_osd_store_is_not_served_as_zeros() {
    let mut cluster = Cluster::start();
    let data = write_random(&cluster, &cluster.uri("vol0"), 42, 8);
    cluster.stop();
    let store = cluster.data_dir().join("osd.1").join("store.dat");
    assert!(
        store.is_file(),
        "expected the store file {}",
        store.display()
    );
    std::fs::remove_file(&store).expect("remove osd.1's store file");
    match cluster.try_restart() {
        Err(report) => {
            // Refusing to run without the store is a correct answer.
            eprintln!("restart without osd.1's store was refused:\n{report}");
        }
        Ok(()) => {
            let back = read_export_prefix(
                &cluster.uri("vol0"),
                8,
                &cluster.scratch().join("after-loss.raw"),
            );
            let zero_blocks = back
                .chunks(4096)
                .zip(data.chunks(4096))
                .filter(|(g, w)| g != w && g.iter().all(|&b| b == 0))
                .count();
            assert_same_bytes(
                &back,
                &data,
                &format!(
                    "vol0 after losing 1 of 3 replicas ({zero_blocks} of 2048 4 KiB blocks \
                     read back as zeros)"
                ),
            );
        }
    }
}
