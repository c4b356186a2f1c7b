//! The CSI driver (`basalt csi`) checked by csi-sanity (kubernetes-csi/csi-test, installed by
//! scripts/install-test-deps.sh) on a 3-host cluster in network namespaces and on
//! `basalt up --csi-endpoint`.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use basalt_csi::proto::controller_client::ControllerClient;
use basalt_csi::proto::node_client::NodeClient;
use basalt_csi::proto::volume_capability::{access_mode::Mode, AccessMode, AccessType};
use basalt_csi::proto::*;
use multihost::{Layout, MultiHost};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a csi-sanity run may take.
const SANITY_TIMEOUT: Duration = Duration::from_secs(600);

/// csi-sanity: on PATH, or where `go install` puts it.
fn csi_sanity() -> PathBuf {
    if let Some(p) = common::find_tool("csi-sanity") {
        return p;
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let go_bin = Path::new(&home).join("go/bin/csi-sanity");
    assert!(
        go_bin.exists(),
        "csi-sanity is missing: scripts/install-test-deps.sh installs it (go install \
         github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity)"
    );
    go_bin
}

/// `basalt csi` serving the controller on `socket`, for the cluster of `mh`; waits until
/// it says it serves.
struct Driver {
    child: Child,
}

impl Driver {
    fn start(mh: &MultiHost, socket: &Path, log: &Path) -> Self {
        Self::start_as(mh, socket, log, "node-a", None)
    }

    /// [`Driver::start`] as node `node_id` (its own state directory beside `log`), in the
    /// network namespace `netns` when given (another machine, as its gateway sees it).
    fn start_as(
        mh: &MultiHost,
        socket: &Path,
        log: &Path,
        node_id: &str,
        netns: Option<&str>,
    ) -> Self {
        let log_file = std::fs::File::create(log).unwrap();
        // nsenter enters the network namespace alone (`ip netns exec` would also give the
        // driver a mount namespace of its own, and its mounts would not be seen here).
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}"))
                    .arg(multihost::basalt_bin());
                c
            }
            None => Command::new(multihost::basalt_bin()),
        };
        let child = cmd
            .args(["csi", "--mode", "all", "--node-id", node_id, "--endpoint"])
            .arg(format!("unix://{}", socket.display()))
            .arg("--nbd-uri")
            .arg(mh.uri("{volume}"))
            .arg("--state-dir")
            .arg(log.with_extension("state"))
            .env("BASALT_META", &mh.meta_url)
            .env("BASALT_KEYRING", &mh.keyring)
            .env("RUST_LOG", "info")
            .stdout(Stdio::from(log_file.try_clone().unwrap()))
            .stderr(Stdio::from(log_file))
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            assert!(
                Instant::now() < deadline,
                "basalt csi did not listen within 30 s:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { child }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The test's scratch directory.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("basalt-csi-")
        .tempdir()
        .unwrap()
}

/// A 3-host cluster and `basalt csi --mode all` for it on a socket in a scratch directory.
fn cluster_and_driver() -> (tempfile::TempDir, MultiHost, PathBuf, Driver) {
    let dir = scratch();
    let mh = MultiHost::start(Layout::default());
    let socket = dir.path().join("csi.sock");
    let driver = Driver::start(&mh, &socket, &dir.path().join("csi.log"));
    (dir, mh, socket, driver)
}

/// Run csi-sanity against `socket` with `extra` flags; returns its output (it must pass).
fn sanity(socket: &Path, dir: &Path, extra: &[&str]) -> String {
    let params = dir.join("params.yaml");
    std::fs::write(&params, "pool: rbd\n").unwrap();
    let mut cmd = Command::new(csi_sanity());
    cmd.arg(format!("--csi.endpoint=unix://{}", socket.display()))
        .arg(format!("--csi.testvolumeparameters={}", params.display()))
        .arg("--ginkgo.no-color")
        .arg(format!(
            "--csi.stagingdir={}",
            dir.join("staging").display()
        ))
        .arg(format!("--csi.mountdir={}", dir.join("mount").display()))
        .arg("--csi.testvolumesize=67108864")
        .arg("--csi.testvolumeexpandsize=134217728")
        .args(extra);
    let out = common::run(&mut cmd, SANITY_TIMEOUT);
    let all = common::text(&out);
    assert!(out.status.success(), "csi-sanity failed:\n{all}");
    all
}

/// The `Ran N of M Specs ... N Passed | F Failed | P Pending | S Skipped` line.
fn summary(output: &str) -> String {
    output
        .lines()
        .filter(|l| l.contains("Passed") && l.contains("Failed") || l.starts_with("Ran "))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// Goal: csi-sanity passes against `basalt csi --mode all` on a 3-host cluster, every spec
/// the driver's capabilities call for: Identity, Controller (volumes idempotent by name,
/// sizes, access modes, volumes from snapshots, snapshots, listing with pagination,
/// capacity, expansion) and Node (a volume staged — attached through the cluster's NBD
/// gateway, a filesystem made and mounted — published, its usage read, unpublished and
/// unstaged).
#[test]
fn csi_sanity_passes() {
    let (dir, _mh, socket, _driver) = cluster_and_driver();
    let out = sanity(&socket, dir.path(), &[]);
    let line = summary(&out);
    eprintln!("csi-sanity: {line}");
    assert!(line.contains(" 0 Failed"), "{line}");
    assert!(line.contains("Passed"), "no csi-sanity summary: {out}");
}

/// A volume capability: access `mode`, as a block device or an ext4 filesystem.
fn capability(mode: Mode, block: bool) -> VolumeCapability {
    VolumeCapability {
        access_mode: Some(AccessMode { mode: mode as i32 }),
        access_type: Some(if block {
            AccessType::Block(volume_capability::BlockVolume {})
        } else {
            AccessType::Mount(volume_capability::MountVolume {
                fs_type: "ext4".into(),
                ..Default::default()
            })
        }),
    }
}

/// A gRPC channel to the driver's unix socket.
async fn channel(socket: &Path) -> tonic::transport::Channel {
    let socket = socket.to_path_buf();
    tonic::transport::Endpoint::from_static("http://csi.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .unwrap()
}

/// Goal: requests csi-sanity does not make get the code the CSI spec prescribes and leave
/// nothing behind: an unknown pool or StorageClass parameter (INVALID_ARGUMENT), a volume
/// larger than its pool can hold (OUT_OF_RANGE), a block volume for writers on several
/// nodes (INVALID_ARGUMENT), a staging path that is not a directory (INVALID_ARGUMENT);
/// a volume with a snapshot cannot be deleted (FAILED_PRECONDITION, naming it) until the
/// snapshot is.
#[test]
fn bad_csi_requests_get_the_spec_codes_and_make_nothing() {
    use tonic::Code;

    let (dir, _mh, socket, _driver) = cluster_and_driver();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut controller = ControllerClient::new(channel(&socket).await);
        let mut node = NodeClient::new(channel(&socket).await);
        let cap = capability;
        let create = |name: &str, params: &[(&str, &str)], bytes: i64, c: VolumeCapability| {
            CreateVolumeRequest {
                name: name.into(),
                capacity_range: Some(CapacityRange {
                    required_bytes: bytes,
                    limit_bytes: 0,
                }),
                volume_capabilities: vec![c],
                parameters: params
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            }
        };
        let count = |mut c: ControllerClient<tonic::transport::Channel>| async move {
            let list = c.list_volumes(ListVolumesRequest::default()).await.unwrap();
            list.into_inner().entries.len()
        };
        let before = count(controller.clone()).await;
        let writer = || cap(Mode::SingleNodeWriter, false);
        let refused = [
            (
                create("v1", &[("pool", "nosuch")], 1 << 20, writer()),
                Code::InvalidArgument,
            ),
            (
                create("v2", &[("replicas", "3")], 1 << 20, writer()),
                Code::InvalidArgument,
            ),
            (create("v3", &[], 1 << 50, writer()), Code::OutOfRange),
            (
                create("v4", &[], 1 << 20, cap(Mode::MultiNodeMultiWriter, true)),
                Code::InvalidArgument,
            ),
        ];
        for (req, code) in refused {
            let name = req.name.clone();
            let err = controller.create_volume(req).await.unwrap_err();
            assert_eq!(err.code(), code, "{name}: {err}");
            eprintln!("{name}: {:?} {}", err.code(), err.message());
        }
        assert_eq!(
            count(controller.clone()).await,
            before,
            "a refused create made a volume"
        );

        // A staging path that is a file.
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"x").unwrap();
        let err = node
            .node_stage_volume(NodeStageVolumeRequest {
                volume_id: "any".into(),
                staging_target_path: file.display().to_string(),
                volume_capability: Some(writer()),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err}");

        // A volume with a snapshot is not deleted until the snapshot is.
        let vol = controller
            .create_volume(create("kept", &[], 1 << 20, writer()))
            .await
            .unwrap()
            .into_inner()
            .volume
            .unwrap();
        controller
            .create_snapshot(CreateSnapshotRequest {
                source_volume_id: vol.volume_id.clone(),
                name: "kept-snap".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let delete = || DeleteVolumeRequest {
            volume_id: vol.volume_id.clone(),
            ..Default::default()
        };
        let err = controller.delete_volume(delete()).await.unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
        assert!(err.message().contains("kept-snap"), "{err}");
        controller
            .delete_snapshot(DeleteSnapshotRequest {
                snapshot_id: "kept-snap".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        controller.delete_volume(delete()).await.unwrap();
        assert_eq!(count(controller.clone()).await, before);
    });
}

/// Goal: a volume moves between nodes as a pod's would: created, staged and published on
/// node A (a filesystem made on first use), files written, unpublished and unstaged; then
/// staged and published on node B (another driver process with its own state), where the
/// files read back; node B is refused while node A holds the volume's writer lock; the
/// volume grown between the two (offline expansion) has its filesystem grown on node B;
/// everything undone leaves no mount, loop device or nbdfuse behind.
#[test]
fn a_volume_moves_between_nodes_with_its_files() {
    let dir = scratch();
    let mh = MultiHost::start(Layout::default());
    let (sock_a, sock_b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let _a = Driver::start_as(&mh, &sock_a, &dir.path().join("a.log"), "node-a", None);
    // Node b is another machine: its own network namespace, its own address.
    let ns_b = mh.hosts[1].netns.clone().expect("hosts in namespaces");
    let _b = Driver::start_as(
        &mh,
        &sock_b,
        &dir.path().join("b.log"),
        "node-b",
        Some(&ns_b),
    );
    let cap = capability(Mode::SingleNodeWriter, false);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut controller = ControllerClient::new(channel(&sock_a).await);
        let volume = controller
            .create_volume(CreateVolumeRequest {
                name: "pvc-moving".into(),
                capacity_range: Some(CapacityRange {
                    required_bytes: 64 << 20,
                    limit_bytes: 0,
                }),
                volume_capabilities: vec![cap.clone()],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .volume
            .unwrap();
        let id = volume.volume_id;
        for (node_socket, name) in [(&sock_a, "a"), (&sock_b, "b")] {
            let mut node = NodeClient::new(channel(node_socket).await);
            let staging = dir.path().join(format!("staging-{name}"));
            let target = dir.path().join(format!("pod-{name}/volume"));
            std::fs::create_dir_all(&staging).unwrap();
            node.node_stage_volume(NodeStageVolumeRequest {
                volume_id: id.clone(),
                staging_target_path: staging.display().to_string(),
                volume_capability: Some(cap.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
            node.node_publish_volume(NodePublishVolumeRequest {
                volume_id: id.clone(),
                staging_target_path: staging.display().to_string(),
                target_path: target.display().to_string(),
                volume_capability: Some(cap.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
            let file = target.join("hello.txt");
            if name == "a" {
                std::fs::write(&file, b"written on node a\n").unwrap();
                std::process::Command::new("sync").status().unwrap();
                // Node b may not write the volume while node a holds its writer lock: its
                // stage is refused with the holder named, and leaves nothing behind.
                let mut node_b = NodeClient::new(channel(&sock_b).await);
                let staging_b = dir.path().join("staging-b");
                std::fs::create_dir_all(&staging_b).unwrap();
                let refused = node_b
                    .node_stage_volume(NodeStageVolumeRequest {
                        volume_id: id.clone(),
                        staging_target_path: staging_b.display().to_string(),
                        volume_capability: Some(cap.clone()),
                        ..Default::default()
                    })
                    .await
                    .expect_err("a second writer is refused while the first holds the lock");
                assert_eq!(
                    refused.code(),
                    tonic::Code::FailedPrecondition,
                    "{refused:?}"
                );
                assert!(
                    refused.message().contains("holds the volume's writer lock"),
                    "the refusal says why: {}",
                    refused.message()
                );
                let shown = mh.cli_ok(&["volume", "lock", "show", &id]);
                assert!(shown.contains("locked by nbd client"), "{shown}");
                assert!(std::fs::read_dir(&staging_b).unwrap().next().is_none());
            } else {
                let text = std::fs::read_to_string(&file).unwrap();
                assert_eq!(text, "written on node a\n");
                // The volume grew while no node had it (offline expansion): the device
                // staged here has the new size, and the filesystem grew to it (at staging,
                // offline; NodeExpandVolume then finds it done).
                let stats = |node: NodeClient<tonic::transport::Channel>| {
                    let (id, path) = (id.clone(), target.display().to_string());
                    async move {
                        let mut node = node;
                        let usage = node
                            .node_get_volume_stats(NodeGetVolumeStatsRequest {
                                volume_id: id,
                                volume_path: path,
                                staging_target_path: String::new(),
                            })
                            .await
                            .unwrap()
                            .into_inner()
                            .usage;
                        usage[0].total
                    }
                };
                let before = stats(node.clone()).await;
                assert!(
                    before > 100 << 20,
                    "the filesystem grew at staging: {before}"
                );
                let grown = node
                    .node_expand_volume(NodeExpandVolumeRequest {
                        volume_id: id.clone(),
                        volume_path: target.display().to_string(),
                        capacity_range: Some(CapacityRange {
                            required_bytes: 128 << 20,
                            limit_bytes: 0,
                        }),
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                assert_eq!(grown.capacity_bytes, 128 << 20);
                let after = stats(node.clone()).await;
                assert_eq!(after, before, "nothing more to grow");
                assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
            }
            node.node_unpublish_volume(NodeUnpublishVolumeRequest {
                volume_id: id.clone(),
                target_path: target.display().to_string(),
            })
            .await
            .unwrap();
            assert!(!target.exists(), "the target path stays after unpublish");
            node.node_unstage_volume(NodeUnstageVolumeRequest {
                volume_id: id.clone(),
                staging_target_path: staging.display().to_string(),
            })
            .await
            .unwrap();
            if name == "a" {
                let expanded = controller
                    .controller_expand_volume(ControllerExpandVolumeRequest {
                        volume_id: id.clone(),
                        capacity_range: Some(CapacityRange {
                            required_bytes: 128 << 20,
                            limit_bytes: 0,
                        }),
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                assert_eq!(expanded.capacity_bytes, 128 << 20);
                assert!(expanded.node_expansion_required);
            }
        }
        controller
            .delete_volume(DeleteVolumeRequest {
                volume_id: id,
                ..Default::default()
            })
            .await
            .unwrap();
    });
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let ours = dir.path().display().to_string();
    assert!(
        !mounts.contains(&ours),
        "mounts left under {ours}:\n{mounts}"
    );
}

/// An NBD client in a child process (python3-libnbd), driven line by line: `write BLOCK
/// CHAR` (4 KiB of CHAR, then a flush) answers `ok` or `err MESSAGE`, `read BLOCK` answers
/// `ok CHAR`. Run in network namespace `netns` when given (another machine).
struct NbdClient {
    child: Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
}

/// Debian's Python, which has python3-libnbd (a python3 earlier on PATH may not).
const PYTHON: &str = "/usr/bin/python3";

const NBD_CLIENT: &str = r#"
import nbd, sys
h = nbd.NBD()
said = []
h.set_debug(True)
h.set_debug_callback(lambda context, msg: said.append(msg))
try:
    h.connect_uri(sys.argv[1])
except nbd.Error as e:
    print("refused", e.string, "|", " | ".join(m for m in said if "locked" in m), flush=True)
    sys.exit(3)
print("connected", flush=True)
for line in sys.stdin:
    words = line.split()
    try:
        if words[0] == "write":
            h.pwrite(words[2].encode() * 4096, int(words[1]) * 4096)
            h.flush()
            print("ok", flush=True)
        elif words[0] == "read":
            print("ok", h.pread(4096, int(words[1]) * 4096)[:1].decode(), flush=True)
    except nbd.Error as e:
        print("err", e.string, flush=True)
"#;

impl NbdClient {
    /// Connect to `uri`; the first line says `connected` or `refused MESSAGE`.
    fn connect(uri: &str, netns: Option<&str>) -> (Self, String) {
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, PYTHON]);
                c
            }
            None => Command::new(PYTHON),
        };
        let mut child = cmd
            .args(["-c", NBD_CLIENT, uri])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut client = Self {
            child,
            stdin,
            lines,
        };
        let first = client.line();
        (client, first)
    }

    fn line(&mut self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| "no answer within 60 s".into())
    }

    fn ask(&mut self, command: &str) -> String {
        use std::io::Write;
        writeln!(self.stdin, "{command}").unwrap();
        self.line()
    }
}

impl Drop for NbdClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Goal: a volume has one writer. A second client's open is refused naming the holder; a
/// break fences the holder off (its next write fails) and lets the other client in; when
/// the holder's gateway dies, the next client takes the lock once its lease expires and
/// fences it first. What the holders wrote before losing the lock stays. A handover window
/// lets exactly one more client join (live migration), and the source's exit leaves it.
#[test]
fn the_writer_lock_refuses_a_second_client_and_fences_on_break_and_expiry() {
    let mh = MultiHost::start(Layout::default());
    mh.cli_ok(&["volume", "create", "shared", "--size", "64M"]);
    let other = mh.hosts[2].clone();
    let other_ns = other.netns.clone().expect("hosts in namespaces");
    // A second gateway, on a storage host: the client that dies with it.
    let port = 10_960;
    let gateway_b = mh.spawn_gateway_on(&mh.hosts[1], port, &[]).unwrap();
    let uri_a = mh.uri("shared");
    let uri_b = mh.uri_on(&mh.hosts[1], port, "shared");

    let (mut a, said) = NbdClient::connect(&uri_a, None);
    assert_eq!(said, "connected");
    assert_eq!(a.ask("write 0 A"), "ok");
    let (_, said) = NbdClient::connect(&uri_b, Some(&other_ns));
    assert!(
        said.starts_with("refused") && said.contains("locked for writing by nbd client"),
        "a second writer is refused with the holder named: {said}"
    );
    let shown = mh.cli_ok(&["volume", "lock", "show", "shared"]);
    assert!(shown.contains("locked by nbd client"), "{shown}");

    // A break fences the holder off: its writes fail from then on.
    let broke = mh.cli_ok(&["volume", "lock", "break", "shared"]);
    assert!(broke.contains("broke the lock of nbd client"), "{broke}");
    let fenced = a.ask("write 1 a");
    assert!(
        fenced.starts_with("err"),
        "a fenced holder's write: {fenced}"
    );
    let (mut b, said) = NbdClient::connect(&uri_b, Some(&other_ns));
    assert_eq!(said, "connected");
    assert_eq!(b.ask("read 0"), "ok A");
    assert_eq!(b.ask("read 1"), "ok \0", "the fenced write did not land");
    assert_eq!(b.ask("write 0 B"), "ok");
    drop(a);

    // B's gateway dies with the lock held: once its lease expires, the next client takes
    // the lock over (fencing first) and reads what B wrote.
    gateway_b.kill9().unwrap();
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut c = loop {
        let (c, said) = NbdClient::connect(&uri_a, None);
        if said == "connected" {
            break c;
        }
        assert!(said.contains("locked for writing"), "{said}");
        assert!(
            Instant::now() < deadline,
            "the dead holder's lock was never taken over"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(c.ask("read 0"), "ok B");
    assert_eq!(c.ask("write 2 C"), "ok");
    drop(b);

    // A live migration's handover: one more client joins within the window, a third is
    // still refused; when the source goes, the destination holds the lock alone.
    let opened = mh.cli_ok(&["volume", "lock", "handover", "shared", "--window", "30s"]);
    assert!(opened.contains("handover open until"), "{opened}");
    let (mut d, said) = NbdClient::connect(&uri_a, Some(&other_ns));
    assert_eq!(said, "connected", "the migration's destination joins");
    let third_ns = mh.hosts[0].netns.clone().expect("hosts in namespaces");
    let (_, said) = NbdClient::connect(&uri_a, Some(&third_ns));
    assert!(said.starts_with("refused"), "one join per handover: {said}");
    drop(c);
    assert_eq!(d.ask("write 3 D"), "ok");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let shown = mh.cli_ok(&["volume", "lock", "show", "shared"]);
        if shown.matches("locked by").count() == 1 && shown.contains(&other.ip.to_string()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the source never let go:\n{shown}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(d);
    let snapshots = mh.cli_ok(&["volume", "snapshot", "ls", "shared"]);
    assert_eq!(
        snapshots.matches("writer-lock fence").count(),
        2,
        "one fence per break or takeover:\n{snapshots}"
    );
}

/// Goal: csi-sanity passes as well against the driver `basalt up --csi-endpoint` serves in
/// its own process (volumes in its pool, attached through its NBD listener).
#[test]
fn csi_sanity_passes_on_basalt_up() {
    let dir = scratch();
    let socket = dir.path().join("up-csi.sock");
    let endpoint = format!("unix://{}", socket.display());
    let _up = common::Cluster::start_with(&["--csi-endpoint", &endpoint]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "basalt up serves no CSI socket");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = sanity(&socket, dir.path(), &[]);
    let line = summary(&out);
    eprintln!("csi-sanity on basalt up: {line}");
    assert!(line.contains(" 0 Failed"), "{line}");
    assert!(line.contains("Passed"), "no csi-sanity summary: {out}");
}
