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
        Self::start_as(mh, socket, log, "node-a")
    }

    /// [`Driver::start`] as node `node_id` (its own state directory beside `log`).
    fn start_as(mh: &MultiHost, socket: &Path, log: &Path, node_id: &str) -> Self {
        let log_file = std::fs::File::create(log).unwrap();
        let child = Command::new(multihost::basalt_bin())
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
/// files read back; everything undone leaves no mount, loop device or nbdfuse behind.
#[test]
fn a_volume_moves_between_nodes_with_its_files() {
    let dir = scratch();
    let mh = MultiHost::start(Layout::default());
    let (sock_a, sock_b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let _a = Driver::start_as(&mh, &sock_a, &dir.path().join("a.log"), "node-a");
    let _b = Driver::start_as(&mh, &sock_b, &dir.path().join("b.log"), "node-b");
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
            } else {
                let text = std::fs::read_to_string(&file).unwrap();
                assert_eq!(text, "written on node a\n");
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
