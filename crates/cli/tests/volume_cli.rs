//! Volume management through `basalt volume` against a running cluster: create, ls, info,
//! resize and rm, their error messages and exit codes, and what NBD clients see after each.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Assert `out` failed (non-zero exit) with `error: ...` containing `message` on stderr.
fn assert_error(out: &Output, message: &str, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{what} should fail, but exited {}\n{}",
        out.status,
        text(out)
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("error: ") && l.contains(message)),
        "{what}: expected an `error: ...{message}...` line on stderr, got:\n{stderr}"
    );
}

/// `ls --json`, as (name, size) pairs sorted by name.
fn ls(cluster: &Cluster) -> Vec<(String, u64)> {
    let out = cluster.volume_ok(&["ls", "--json"]);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("ls --json: {e}:\n{out}"));
    let mut r: Vec<(String, u64)> = v
        .as_array()
        .unwrap_or_else(|| panic!("ls --json is not an array: {v}"))
        .iter()
        .map(|e| {
            (
                e["name"].as_str().expect("name").to_string(),
                e["size"].as_u64().expect("size"),
            )
        })
        .collect();
    r.sort();
    r
}

/// Create with each size suffix, list (table and JSON), show info (text and JSON), remove.
#[test]
fn create_ls_info_rm_with_size_suffixes() {
    let cluster = Cluster::start();
    let out = cluster.volume_ok(&["create", "db1", "--size", "10G"]);
    assert!(out.contains("db1"), "create output: {out}");
    cluster.volume_ok(&["create", "m512", "--size", "512M"]);
    cluster.volume_ok(&["create", "k64", "-s", "64K"]);
    cluster.volume_ok(&["create", "bytes", "--size", "8192"]);
    cluster.volume_ok(&["create", "tera", "--size", "1T"]);
    assert_eq!(
        ls(&cluster),
        vec![
            ("bytes".to_string(), 8192),
            ("db1".to_string(), 10 * GIB),
            ("k64".to_string(), 64 * KIB),
            ("m512".to_string(), 512 * MIB),
            ("tera".to_string(), 1 << 40),
            ("vol0".to_string(), VOL0_BYTES),
        ]
    );
    let table = cluster.volume_ok(&["ls"]);
    for name in ["bytes", "db1", "k64", "m512", "tera", "vol0"] {
        assert!(
            table
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "ls table lacks {name}:\n{table}"
        );
    }

    let info = cluster.volume_ok(&["info", "db1", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&info).expect("info --json is JSON");
    assert_eq!(v["name"].as_str(), Some("db1"), "{v}");
    assert_eq!(v["size"].as_u64(), Some(10 * GIB), "{v}");
    assert_eq!(v["object_size"].as_u64(), Some(128 * KIB), "{v}");
    let info = cluster.volume_ok(&["info", "m512"]);
    assert!(info.contains("m512"), "info text: {info}");
    assert!(
        info.contains(&(512 * MIB).to_string()),
        "info text lacks the byte size: {info}"
    );

    // Removing the 1 TiB volume is covered by `rm_of_large_empty_volume_is_prompt`.
    for name in ["db1", "k64", "bytes"] {
        cluster.volume_ok(&["rm", name]);
    }
    assert_eq!(
        ls(&cluster),
        vec![
            ("m512".to_string(), 512 * MIB),
            ("tera".to_string(), 1 << 40),
            ("vol0".to_string(), VOL0_BYTES)
        ]
    );
}

/// Bound on `rm`/shrink of a huge but nearly empty volume. Generous for a debug build: such
/// a volume holds a single object to delete.
const HUGE_VOLUME_OP_BOUND: Duration = Duration::from_secs(30);

/// Run `basalt volume ARGS` and assert it succeeds within `HUGE_VOLUME_OP_BOUND`.
fn assert_prompt(cluster: &Cluster, args: &[&str]) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt"));
    cmd.args(["volume", "--control", &cluster.control.to_string()])
        .args(args);
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn basalt volume");
    let status = wait_timeout(&mut child, HUGE_VOLUME_OP_BOUND);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let what = format!("`basalt volume {}`", args.join(" "));
    let status = status.unwrap_or_else(|| {
        panic!("{what} on a 1 TiB volume holding 64 KiB did not finish within {HUGE_VOLUME_OP_BOUND:?}")
    });
    assert!(status.success(), "{what} exited {status}");
    eprintln!("{what} took {:?}", started.elapsed());
}

/// Removing a large, nearly empty thin volume costs time in proportion to the data it holds,
/// not to its nominal size: `rm` of a 1 TiB volume holding 64 KiB is prompt.
#[test]
fn rm_of_large_empty_volume_is_prompt() {
    let cluster = Cluster::start();
    cluster.volume_ok(&["create", "huge", "--size", "1T"]);
    qemu_io_ok(&cluster.uri("huge"), &["write -P 0x5e 512G 64k"]);
    assert_prompt(&cluster, &["rm", "huge"]);
    assert_eq!(ls(&cluster), vec![("vol0".to_string(), VOL0_BYTES)]);
}

/// Shrinking a large, nearly empty thin volume is prompt too, and drops the data past the
/// new end (a regrow reads zeros there).
#[test]
fn shrink_of_large_empty_volume_is_prompt() {
    let cluster = Cluster::start();
    cluster.volume_ok(&["create", "huge", "--size", "1T"]);
    qemu_io_ok(
        &cluster.uri("huge"),
        &["write -P 0x5e 512G 64k", "write -P 0x5f 0 64k"],
    );
    assert_prompt(&cluster, &["resize", "huge", "1G", "--allow-shrink"]);
    assert_eq!(nbd_size(&cluster.uri("huge")), GIB);
    qemu_io_ok(&cluster.uri("huge"), &["read -P 0x5f 0 64k"]);
}

/// Each documented error prints `error: ...` on stderr (and nothing on stdout) and exits
/// with its documented code (docs/cli.md: 1 error, 3 not found, 4 exists), changing nothing.
#[test]
fn errors_are_reported_with_nonzero_exit() {
    let cluster = Cluster::start();
    cluster.volume_ok(&["create", "x", "--size", "1M"]);
    let cases: [(&[&str], &str, i32); 12] = [
        (&["create", "x", "--size", "1M"], "volume \"x\" exists", 4),
        (
            &["create", "vol0", "--size", "1M"],
            "volume \"vol0\" exists",
            4,
        ),
        (&["info", "nope"], "volume \"nope\" does not exist", 3),
        (&["rm", "nope"], "volume \"nope\" does not exist", 3),
        (
            &["resize", "nope", "1M"],
            "volume \"nope\" does not exist",
            3,
        ),
        (
            &["create", "y", "--size", "1M", "--pool", "nopool"],
            "pool \"nopool\" does not exist",
            3,
        ),
        (
            &["create", "y", "--size", "1000"],
            "size must be a multiple of 4096 (got 1000)",
            1,
        ),
        (
            &["create", "y", "--size", "abc"],
            "invalid size \"abc\": ",
            1,
        ),
        (&["resize", "x", "abc"], "invalid size \"abc\": ", 1),
        (
            &["resize", "x", "512K"],
            "volume \"x\" is 1.0 MiB: resizing it to 512.0 KiB would discard its last 512.0 KiB; \
             pass --allow-shrink",
            1,
        ),
        (
            &["resize", "x", "5000"],
            "size must be a multiple of 4096 (got 5000)",
            1,
        ),
        (&["info"], "required arguments were not provided", 2),
    ];
    for (args, message, code) in cases {
        let out = cluster.volume(args);
        let what = format!("basalt volume {}", args.join(" "));
        if code == 2 {
            // clap's usage errors: `error: ...` too, with a usage line.
            assert!(
                String::from_utf8_lossy(&out.stderr).contains(message),
                "{what}"
            );
        } else {
            assert_error(&out, message, &what);
        }
        assert_eq!(out.status.code(), Some(code), "{what}: {}", text(&out));
        assert!(
            out.stdout.is_empty(),
            "{what} printed on stdout: {}",
            text(&out)
        );
    }
    // Nothing was created, removed or resized by the failed commands.
    assert_eq!(
        ls(&cluster),
        vec![("vol0".to_string(), VOL0_BYTES), ("x".to_string(), MIB)]
    );
    // A control socket nobody listens on is an error too, not a hang or a success.
    let addr = cluster.scratch().join("nobody.sock");
    let out = run(
        Command::new(env!("CARGO_BIN_EXE_basalt"))
            .args(["volume", "--control"])
            .arg(&addr)
            .arg("ls"),
        CLIENT_TIMEOUT,
    );
    assert_error(
        &out,
        "is `basalt up` running?",
        "basalt volume ls against no socket",
    );
    // The control socket is its owner's alone: another user cannot connect.
    let mode = std::fs::metadata(&cluster.control)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "control socket {}", cluster.control);
}

/// A created volume is exported at once (listed, writable, readable); rm unexports it.
#[test]
fn created_volume_is_exported_and_rm_unexports() {
    let cluster = Cluster::start();
    cluster.volume_ok(&["create", "fresh", "--size", "24M"]);
    let names = nbd_list(&cluster.server_uri());
    assert!(names.contains(&"fresh".to_string()), "exports: {names:?}");
    assert_eq!(nbd_size(&cluster.uri("fresh")), 24 * MIB);
    qemu_io_ok(
        &cluster.uri("fresh"),
        &["write -P 0x3c 0 1M", "write -P 0x3d 23M 1M"],
    );
    qemu_io_ok(
        &cluster.unix_uri("fresh"),
        &[
            "read -P 0x3c 0 1M",
            "read -P 0x3d 23M 1M",
            "read -P 0 1M 1M",
        ],
    );
    // vol0 is unaffected by writes to another volume.
    qemu_io_ok(
        &cluster.uri("vol0"),
        &["read -P 0 0 1M", "read -P 0 23M 1M"],
    );

    cluster.volume_ok(&["rm", "fresh"]);
    let names = nbd_list(&cluster.server_uri());
    assert_eq!(names, vec!["vol0".to_string()], "exports after rm");
    let out = qemu_io(&cluster.uri("fresh"), &["read 0 4k"]);
    assert!(
        !out.status.success() || text(&out).to_lowercase().contains("fail"),
        "reading a removed volume should fail:\n{}",
        text(&out)
    );
    // A new volume of the same name starts empty (the old data is gone).
    cluster.volume_ok(&["create", "fresh", "--size", "24M"]);
    qemu_io_ok(
        &cluster.uri("fresh"),
        &["read -P 0 0 1M", "read -P 0 23M 1M"],
    );
}

/// Resize grows (a new connection sees the new size and can use it); shrink then grow again
/// reads zeros past the shrink point while data below it survives.
#[test]
fn resize_grow_shrink_grow() {
    let cluster = Cluster::start();
    cluster.volume_ok(&["create", "r", "--size", "16M"]);
    let uri = cluster.uri("r");
    qemu_io_ok(&uri, &["write -P 0x61 0 1M", "write -P 0x62 12M 4M"]);

    let out = cluster.volume_ok(&["resize", "r", "32M"]);
    assert!(out.contains("\"r\""), "resize output: {out}");
    assert_eq!(nbd_size(&uri), 32 * MIB, "size after growing to 32M");
    let info = cluster.volume_ok(&["info", "r", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&info).expect("info --json");
    assert_eq!(v["size"].as_u64(), Some(32 * MIB), "{v}");
    qemu_io_ok(
        &uri,
        &[
            "write -P 0x63 30M 2M",
            "read -P 0x63 30M 2M",
            "read -P 0x62 12M 4M",
            "read -P 0 16M 14M",
        ],
    );

    cluster.volume_ok(&["resize", "r", "8M", "--allow-shrink"]);
    assert_eq!(nbd_size(&uri), 8 * MIB, "size after shrinking to 8M");
    let out = qemu_io(&uri, &["read 12M 4k"]);
    assert!(
        !out.status.success() || text(&out).to_lowercase().contains("fail"),
        "a read past the shrunken end should fail:\n{}",
        text(&out)
    );

    cluster.volume_ok(&["resize", "r", "32M"]);
    assert_eq!(nbd_size(&uri), 32 * MIB, "size after growing again");
    qemu_io_ok(
        &uri,
        &["read -P 0x61 0 1M", "read -P 0 8M 8M", "read -P 0 16M 16M"],
    );
}

/// Shrink discards the data past the new end even for a client that connected before the
/// shrink: its later write past the new end must not reappear when the volume grows again
/// (the contract: shrink then grow reads zeros past the shrink point).
#[test]
fn shrink_under_connected_client_then_grow_reads_zeros() {
    let cluster = Cluster::start();
    cluster.volume_ok(&["create", "s", "--size", "16M"]);
    let uri = cluster.uri("s");
    let mut old = QemuIoSession::open(&uri);
    let r = old.cmd("write -P 0x11 12M 4k");
    assert!(
        r.starts_with("wrote 4096/4096"),
        "write before the shrink: {r}"
    );
    cluster.volume_ok(&["resize", "s", "8M", "--allow-shrink"]);
    // The old connection still believes the volume is 16 MiB. Whether the server refuses
    // this write or not, it must not land in the volume.
    let late = old.cmd("write -P 0x22 12M 4k");
    drop(old);
    cluster.volume_ok(&["resize", "s", "16M"]);
    let out = qemu_io(&uri, &["read -P 0 12M 4k"]);
    let all = text(&out);
    assert!(
        out.status.success() && !all.contains("Pattern verification failed"),
        "bytes past the shrink point are not zero after regrowing; the pre-shrink connection's \
         write past the new end reported: {late:?}\n{all}"
    );
}

/// Concurrent `create` of the same name: exactly one succeeds, the others report it exists.
#[test]
fn concurrent_create_same_name_one_wins() {
    let cluster = Cluster::start();
    let control = cluster.control.to_string();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let control = control.clone();
            std::thread::spawn(move || {
                run(
                    Command::new(env!("CARGO_BIN_EXE_basalt")).args([
                        "volume",
                        "--control",
                        &control,
                        "create",
                        "race",
                        "--size",
                        "4M",
                    ]),
                    CLIENT_TIMEOUT,
                )
            })
        })
        .collect();
    let outs: Vec<Output> = handles
        .into_iter()
        .map(|h| h.join().expect("create thread"))
        .collect();
    let wins = outs.iter().filter(|o| o.status.success()).count();
    assert_eq!(
        wins,
        1,
        "creates that succeeded: {:?}",
        outs.iter().map(text).collect::<Vec<_>>()
    );
    for o in outs.iter().filter(|o| !o.status.success()) {
        assert_error(o, "volume \"race\" exists", "losing concurrent create");
    }
    assert_eq!(
        ls(&cluster),
        vec![
            ("race".to_string(), 4 * MIB),
            ("vol0".to_string(), VOL0_BYTES)
        ]
    );
}

/// After `rm`, a client that connected before the removal gets errors, not acknowledgements:
/// an acknowledged write to a volume that no longer exists is silently lost data (and
/// recreates objects no volume record references, leaking their space).
#[test]
fn rm_under_connected_client_refuses_later_writes() {
    let cluster = Cluster::start();
    cluster.volume_ok(&["create", "gone", "--size", "16M"]);
    let mut old = QemuIoSession::open(&cluster.uri("gone"));
    let r = old.cmd("write -P 0x11 0 4k");
    assert!(r.starts_with("wrote 4096/4096"), "write before rm: {r}");
    cluster.volume_ok(&["rm", "gone", "--force"]);
    let late = old.cmd("write -P 0x22 4M 4k");
    assert!(
        !late.starts_with("wrote "),
        "a write to the removed volume \"gone\" through a connection opened before `rm` was \
         acknowledged: {late:?}"
    );
}

/// Goal: `volume rm` of a volume an NBD client has open is refused and names the gateway;
/// once the client goes it succeeds, and `--force` removes it while in use.
#[test]
fn rm_refuses_a_volume_in_use_unless_forced() {
    use std::io::{BufRead, Write};
    let cluster = Cluster::start();
    cluster.volume_ok(&["create", "busy", "--size", "8M"]);
    cluster.volume_ok(&["create", "held", "--size", "8M"]);
    // An NBD client that connects, reads once (so it surely is connected), and holds the
    // connection: qemu-io waiting for its next command on stdin.
    let hold = |name: &str| {
        let mut child = Command::new(require_tool("qemu-io", "qemu-utils"))
            .args(["-f", "raw", &cluster.uri(name)])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        writeln!(child.stdin.as_mut().unwrap(), "read 0 4k").unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        // Bound: qemu-io prints a few lines; the read's result ends them.
        for _ in 0..20 {
            line.clear();
            out.read_line(&mut line).unwrap();
            if line.contains("read 4096/4096") {
                return child;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("qemu-io did not read: {line}");
    };
    let mut client = hold("busy");
    let refused = cluster.volume(&["rm", "busy"]);
    assert_error(
        &refused,
        "volume \"busy\" is open in the NBD server of basalt up",
        "rm in use",
    );
    assert!(text(&refused).contains("--force"), "{}", text(&refused));
    let _ = client.kill();
    let _ = client.wait();
    // Removable once the client is gone (no sleep: rm waits briefly for its record to go).
    let out = cluster.volume_ok(&["rm", "busy"]);
    assert!(
        out.contains("removed volume \"busy\" (8.0 MiB, 0 snapshots)"),
        "{out}"
    );

    let mut client = hold("held");
    let out = cluster.volume_ok(&["rm", "held", "--force"]);
    assert!(out.contains("removed volume \"held\""), "{out}");
    let _ = client.kill();
    let _ = client.wait();
}

/// Goal: a reader that stops before the output ends (`basalt volume ls | true`) ends the
/// command quietly with the SIGPIPE status, as for other Unix tools — no panic on stderr.
/// (Regression: printing to the closed pipe panicked.)
#[test]
fn a_closed_pipe_ends_a_listing_quietly() {
    let cluster = Cluster::start();
    let script = format!(
        "set -o pipefail; {} volume ls --control {} | true; echo \"status $?\" >&2",
        env!("CARGO_BIN_EXE_basalt"),
        cluster.control
    );
    let out = run(Command::new("bash").args(["-c", &script]), CLIENT_TIMEOUT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("status 141"), "{err}");
}

/// Goal: `basalt up` never removes a pool it uses itself (new volumes go there), saying why,
/// and a missing pool is not found (exit 3).
#[test]
fn basalt_up_keeps_its_own_pool() {
    let cluster = Cluster::start();
    let pool = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt"));
        cmd.arg("pool")
            .args(args)
            .args(["--control", &cluster.control]);
        run(&mut cmd, CLIENT_TIMEOUT)
    };
    let out = pool(&["rm", "rbd"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("this cluster's own"), "{}", text(&out));
    let ls = pool(&["ls"]);
    assert!(String::from_utf8_lossy(&ls.stdout).contains("rbd"));
    let out = pool(&["rm", "no-such-pool"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
}

/// Goal: S3 key errors exit with the documented codes: 3 for a key that does not exist.
#[test]
fn s3_key_errors_have_their_exit_codes() {
    let cluster = Cluster::start();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt"));
    cmd.args(["s3", "key", "rm", "AKNOSUCHKEY0000000000"])
        .args(["--control", &cluster.control]);
    let out = run(&mut cmd, CLIENT_TIMEOUT);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("does not exist"), "{}", text(&out));
}
