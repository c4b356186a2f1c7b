//! Object-backed volumes end to end: a bucket written with boto3 to `basalt up`'s gateway,
//! `basalt objvol create`, the export mounted by the kernel (nbdfuse → loop → EROFS), and
//! what reached the gateway counted by its metrics.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
#[allow(dead_code)] // The S3 helpers are shared with the S3 suites; this uses two.
mod s3;

use common::{run, text, Cluster};
use s3::{credentials, endpoint};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const TOOL_TIMEOUT: Duration = Duration::from_secs(300);
/// Keys in the prefix with many (several directory blocks).
const WIDE_KEYS: usize = 1500;

fn basalt(cluster: &Cluster, args: &[&str]) -> Output {
    run(
        Command::new(env!("CARGO_BIN_EXE_basalt"))
            .args(args)
            .args(["--control", &cluster.control.to_string()]),
        TOOL_TIMEOUT,
    )
}

fn basalt_ok(cluster: &Cluster, args: &[&str]) -> String {
    let out = basalt(cluster, args);
    assert!(out.status.success(), "basalt {args:?}:\n{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fixture(cluster: &Cluster, args: &[&str]) {
    let (access, secret) = credentials(cluster.data_dir());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/objvol/fixture.py");
    let out = run(
        Command::new("python3")
            .arg(script)
            .args(args)
            .env("S3_ENDPOINT", endpoint(cluster))
            .env("AWS_ACCESS_KEY_ID", access)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
        TOOL_TIMEOUT,
    );
    assert!(out.status.success(), "fixture.py {args:?}:\n{}", text(&out));
}

/// The gateway's `/metrics` address, from `basalt up`'s banner.
fn metrics_addr(cluster: &Cluster) -> String {
    cluster
        .stdout_text()
        .lines()
        .find_map(|l| l.trim().strip_prefix("Metrics:"))
        .and_then(|rest| rest.trim().strip_prefix("http://"))
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .expect("the banner names the metrics endpoint")
        .to_string()
}

/// (GetObject requests, bytes they answered) so far.
fn gets(addr: &str) -> (u64, u64) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let value = |prefix: &str| -> u64 {
        body.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{prefix} in:\n{body}"))
    };
    (
        value("basalt_s3_requests_total{op=\"GetObject\"}"),
        value("basalt_s3_get_object_bytes_total"),
    )
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

/// Whether this machine can mount: root, /dev/fuse, nbdfuse.
fn can_mount() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    root && Path::new("/dev/fuse").exists() && common::find_tool("nbdfuse").is_some()
}

/// An objvol mounted: nbdfuse serving the export as a file, a read-only loop device (direct
/// I/O: no page-cache readahead in between) and the EROFS mount. Undone on drop.
struct Mounted {
    fuse_dir: PathBuf,
    nbdfuse: Child,
    loop_dev: String,
    mnt: PathBuf,
    undone: bool,
}

impl Mounted {
    fn new(cluster: &Cluster, export: &str, dir: &Path) -> Self {
        let fuse_dir = dir.join("fuse");
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&fuse_dir).unwrap();
        std::fs::create_dir_all(&mnt).unwrap();
        let nbdfuse = Command::new("nbdfuse")
            .stderr(Stdio::null())
            .arg("-r")
            .arg(&fuse_dir)
            .arg(cluster.uri(export))
            .spawn()
            .expect("start nbdfuse");
        let file = fuse_dir.join("nbd");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !file.exists() {
            assert!(
                Instant::now() < deadline,
                "nbdfuse did not serve {}",
                file.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let out = run(
            Command::new("losetup")
                .args(["-r", "--direct-io=on", "-f", "--show"])
                .arg(&file),
            TOOL_TIMEOUT,
        );
        assert!(out.status.success(), "losetup: {}", text(&out));
        let loop_dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let mut m = Mounted {
            fuse_dir,
            nbdfuse,
            loop_dev,
            mnt,
            undone: false,
        };
        let out = run(
            Command::new("mount")
                .args(["-t", "erofs", "-o", "ro", &m.loop_dev])
                .arg(&m.mnt),
            TOOL_TIMEOUT,
        );
        if !out.status.success() {
            m.undo();
            panic!("mount -t erofs: {}", text(&out));
        }
        m
    }

    fn undo(&mut self) {
        if std::mem::replace(&mut self.undone, true) {
            return;
        }
        let quiet = |c: &mut Command| {
            let _ = c.stdout(Stdio::null()).stderr(Stdio::null()).status();
        };
        quiet(Command::new("umount").arg(&self.mnt));
        quiet(Command::new("losetup").args(["-d", &self.loop_dev]));
        // The loop device lets go of the file a moment after `losetup -d`; until then the
        // FUSE mount is busy. Bound: 50 tries of 100 ms, then a lazy unmount, so that a
        // killed nbdfuse never leaves a dead mount behind (a later mount here would fail).
        let unmounted = (0..50).any(|_| {
            let ok = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.fuse_dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                std::thread::sleep(Duration::from_millis(100));
            }
            ok
        });
        if !unmounted {
            quiet(Command::new("fusermount3").arg("-uz").arg(&self.fuse_dir));
        }
        let _ = common::wait_timeout(&mut self.nbdfuse, Duration::from_secs(10));
        let _ = self.nbdfuse.kill();
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.undo();
    }
}

/// Every file under `root` with its size, by path relative to it.
fn listing(root: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                todo.push(e.path());
            } else {
                let rel = e
                    .path()
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.push((rel, meta.len()));
            }
        }
    }
    out.sort();
    out
}

/// Goal: a bucket becomes a filesystem without copying its objects — the build lists and
/// never reads an object, `fsck.erofs` accepts the device, mounting and walking the tree
/// fetch nothing, reading a file fetches exactly its bytes, every file's sha256 is its
/// object's, an object overwritten after the build reads as EIO (never other bytes) until
/// `refresh`, and keys that cannot be paths are skipped and reported.
#[test]
fn a_bucket_mounts_as_erofs_and_is_read_lazily() {
    if !can_mount() {
        eprintln!("skipped: needs root, /dev/fuse and nbdfuse (scripts/install-test-deps.sh)");
        return;
    }
    let cluster = Cluster::start_with(&["--metrics-listen", "127.0.0.1:0"]);
    let metrics = metrics_addr(&cluster);
    let scratch = cluster.scratch();
    let sums_path = scratch.join("objects.json");
    fixture(
        &cluster,
        &[
            "put",
            "photos",
            sums_path.to_str().unwrap(),
            &WIDE_KEYS.to_string(),
        ],
    );
    let fixture_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&sums_path).unwrap()).unwrap();
    let objects = fixture_json["objects"].as_object().unwrap().clone();

    // Build: listing only.
    let before = gets(&metrics);
    let out = basalt_ok(
        &cluster,
        &["objvol", "create", "photos", "--bucket", "photos"],
    );
    assert_eq!(gets(&metrics), before, "the build read objects:\n{out}");
    assert!(out.contains(&format!("{} files", objects.len())), "{out}");
    assert!(out.contains("skipped 4 keys"), "{out}");
    let info: serde_json::Value = serde_json::from_str(&basalt_ok(
        &cluster,
        &["objvol", "info", "photos", "--json"],
    ))
    .unwrap();
    assert_eq!(info["files"], objects.len() as u64);
    assert_eq!(info["state"], "ready");
    let skipped: Vec<&str> = info["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[0].as_str().unwrap())
        .collect();
    for key in fixture_json["skipped"].as_array().unwrap() {
        assert!(
            skipped.contains(&key.as_str().unwrap()),
            "{key} reported as skipped: {skipped:?}"
        );
    }
    let per_file = (info["index_bytes"].as_u64().unwrap()
        + info["extents_bytes"].as_u64().unwrap())
        / objects.len() as u64;
    assert!(per_file <= 150, "{per_file} bytes of index per file");
    let ls = basalt_ok(&cluster, &["objvol", "ls"]);
    assert!(ls.contains("photos") && ls.contains("ready"), "{ls}");
    let volumes = basalt_ok(&cluster, &["volume", "ls"]);
    assert!(volumes.contains("objvol:photos"), "{volumes}");
    let exports = common::nbd_list(&cluster.server_uri());
    assert!(
        exports.contains(&"objvol:photos".to_string()),
        "{exports:?}"
    );

    // Mount, walk, fsck: nothing fetched.
    let mut m = Mounted::new(&cluster, "objvol:photos", &scratch);
    let walked = listing(&m.mnt);
    let mut want: Vec<(String, u64)> = objects
        .iter()
        .map(|(k, v)| (k.clone(), v["size"].as_u64().unwrap()))
        .collect();
    want.sort();
    assert_eq!(walked, want, "the tree is the bucket's keys and sizes");
    let out = run(Command::new("ls").arg("-lR").arg(&m.mnt), TOOL_TIMEOUT);
    assert!(out.status.success());
    let out = run(Command::new("fsck.erofs").arg(&m.loop_dev), TOOL_TIMEOUT);
    assert!(out.status.success(), "fsck.erofs: {}", text(&out));
    assert_eq!(
        gets(&metrics),
        before,
        "mounting, walking and fsck fetched object bytes"
    );

    // One file: exactly its bytes.
    let one = "nested/deeper/f6.bin";
    let data = std::fs::read(m.mnt.join(one)).unwrap();
    let after = gets(&metrics);
    assert_eq!(
        after.1 - before.1,
        data.len() as u64,
        "bytes fetched to read {one}"
    );
    assert_eq!(sha256_hex(&data), objects[one]["sha256"].as_str().unwrap());

    // Every file.
    for (key, v) in &objects {
        let data = std::fs::read(m.mnt.join(key)).unwrap();
        assert_eq!(sha256_hex(&data), v["sha256"].as_str().unwrap(), "{key}");
    }
    let total: u64 = objects.values().map(|v| v["size"].as_u64().unwrap()).sum();
    let fetched = gets(&metrics).1 - before.1;
    assert!(
        fetched <= total + total / 20,
        "{fetched} bytes fetched to read {total} bytes of files"
    );

    // An object overwritten after the build: EIO for it, the others still read.
    let changed = "wide/img-000007.jpg";
    fixture(&cluster, &["overwrite", "photos", changed]);
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    let e = std::fs::read(m.mnt.join(changed)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc_eio()), "{e}");
    let other = "wide/img-000008.jpg";
    assert_eq!(
        sha256_hex(&std::fs::read(m.mnt.join(other)).unwrap()),
        objects[other]["sha256"].as_str().unwrap()
    );
    m.undo();
    drop(m);

    // Refresh: the new index has the new bytes.
    let out = basalt_ok(&cluster, &["objvol", "refresh", "photos"]);
    assert!(out.contains("refreshed objvol \"photos\""), "{out}");
    let m = Mounted::new(&cluster, "objvol:photos", &scratch);
    assert_eq!(
        std::fs::read(m.mnt.join(changed)).unwrap(),
        b"overwritten after the build\n"
    );
    drop(m);
    basalt_ok(&cluster, &["objvol", "rm", "photos"]);
    assert!(!basalt_ok(&cluster, &["objvol", "ls"]).contains("photos"));
    assert!(!common::nbd_list(&cluster.server_uri()).contains(&"objvol:photos".to_string()));
}

/// EIO, as the kernel reports it.
fn libc_eio() -> i32 {
    5
}

/// Goal: a build that cannot list — no such bucket, a wrong key, an endpoint that does not
/// answer, a malformed endpoint — fails with a clear error and leaves no objvol behind.
#[test]
fn builds_that_cannot_list_fail_cleanly() {
    let cluster = Cluster::start();
    let scratch = cluster.scratch();
    let wrong = scratch.join("wrong-key");
    std::fs::write(&wrong, "AKNOTAKEY:notasecret\n").unwrap();
    let wrong = wrong.to_str().unwrap();
    fixture(
        &cluster,
        &["put", "real", scratch.join("o.json").to_str().unwrap(), "3"],
    );
    for (args, needle) in [
        (vec!["--bucket", "no-such-bucket"], "NoSuchBucket"),
        (
            vec!["--bucket", "real", "--credentials", wrong],
            "InvalidAccessKeyId",
        ),
        (
            vec![
                "--bucket",
                "real",
                "--endpoint",
                "http://127.0.0.1:9",
                "--credentials",
                wrong,
            ],
            "connect",
        ),
        (
            vec![
                "--bucket",
                "real",
                "--endpoint",
                "https://example.com",
                "--credentials",
                wrong,
            ],
            "https",
        ),
        (
            vec!["--bucket", "real", "--credentials", "/no/such/file"],
            "/no/such/file",
        ),
    ] {
        let mut all = vec!["objvol", "create", "v"];
        all.extend(&args);
        let out = basalt(&cluster, &all);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {needle:?} in:\n{err}");
        let ls = basalt_ok(&cluster, &["objvol", "ls"]);
        assert!(!ls.contains("\nv "), "{args:?} left an objvol:\n{ls}");
    }
    let out = basalt(&cluster, &["objvol", "info", "nothing"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
}
