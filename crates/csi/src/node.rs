//! The CSI Node service: a volume attached to this node as a block device through an NBD
//! gateway (`--nbd-uri`; nbdfuse and a loop device where the kernel has no NBD client, as
//! here: `basalt_attach`), a filesystem made on first use and mounted at the staging path,
//! bind-mounted at each target path (docs/design.md, "Kubernetes: the CSI driver", Node).
//! What is staged is recorded under the state directory, so a restarted plugin still
//! unstages what an earlier run staged.

use crate::errors::missing;
use crate::proto::node_server::Node;
use crate::proto::node_service_capability::rpc::Type as RpcType;
use crate::proto::volume_capability::access_mode::Mode as AccessMode;
use crate::proto::volume_capability::AccessType;
use crate::proto::*;
use basalt_attach::{is_mount_point, run, Attachment};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;
use tonic::{Request, Response, Status};

/// The Node service of one node.
pub struct NodeService {
    /// How Kubernetes names this node (NodeGetInfo).
    node_id: String,
    /// The NBD URI of a volume, `{volume}` standing for its name (None: this node cannot
    /// attach; staging is refused saying so).
    nbd_uri: Option<String>,
    /// Where staged volumes are recorded (and their FUSE directories live).
    state_dir: PathBuf,
    /// One attach or detach at a time on this node.
    busy: tokio::sync::Mutex<()>,
}

/// A volume staged on this node.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Staged {
    volume: String,
    attachment: Attachment,
    staging: PathBuf,
    /// Block mode: nothing is mounted at the staging path.
    block: bool,
    read_only: bool,
    /// The target paths it is published at.
    #[serde(default)]
    targets: Vec<PathBuf>,
}

impl NodeService {
    /// The volume `volume_id` staged here, and `volume_path` if it is its staging path or
    /// one of its targets (InvalidArgument when either is missing, NotFound otherwise).
    fn staged_at(&self, volume_id: &str, volume_path: &str) -> Result<(Staged, PathBuf), Status> {
        if volume_id.is_empty() {
            return Err(missing("volume_id"));
        }
        if volume_path.is_empty() {
            return Err(missing("volume_path"));
        }
        let Some(staged) = self.staged(volume_id)? else {
            return Err(Status::not_found(format!(
                "volume {volume_id} is not staged on this node"
            )));
        };
        let path = PathBuf::from(volume_path);
        if path != staged.staging && !staged.targets.contains(&path) {
            return Err(Status::not_found(format!(
                "volume {volume_id} is not at {volume_path} on this node"
            )));
        }
        Ok((staged, path))
    }

    pub fn new(node_id: String, nbd_uri: Option<String>, state_dir: PathBuf) -> Self {
        Self {
            node_id,
            nbd_uri,
            state_dir,
            busy: tokio::sync::Mutex::new(()),
        }
    }

    fn record_path(&self, volume: &str) -> PathBuf {
        self.state_dir
            .join("volumes")
            .join(format!("{volume}.json"))
    }

    fn staged(&self, volume: &str) -> Result<Option<Staged>, Status> {
        match std::fs::read(self.record_path(volume)) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                Status::internal(format!("the record of staged volume {volume}: {e}"))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Status::internal(format!(
                "read the record of staged volume {volume}: {e}"
            ))),
        }
    }

    fn save(&self, staged: &Staged) -> Result<(), Status> {
        let path = self.record_path(&staged.volume);
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(path.parent().unwrap_or(Path::new("/")))?;
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, serde_json::to_vec(staged).unwrap_or_default())?;
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| Status::internal(format!("record {}: {e}", path.display())))
    }
}

/// A step of attaching or mounting that failed: the node cannot do it now.
fn step_failed(e: basalt_attach::AttachError) -> Status {
    match e {
        basalt_attach::AttachError::Unavailable(why) => Status::failed_precondition(why),
        // The gateway refused the open by policy: another client holds the volume's
        // writer lock (libnbd reports the refusal, not the gateway's message naming the
        // holder).
        e if e.to_string().contains("server policy prevents") => {
            Status::failed_precondition(format!(
                "{e}: another client holds the volume's writer lock (it is attached \
                 elsewhere); `basalt volume lock show VOLUME` names the holder"
            ))
        }
        e => Status::internal(e.to_string()),
    }
}

/// Usage of `staged` at `path`: a filesystem's bytes and inodes (`df`), or a block
/// device's size.
fn volume_usage(staged: &Staged, path: &Path) -> Result<Vec<VolumeUsage>, Status> {
    use volume_usage::Unit;
    let number = |text: &str| text.trim().parse::<i64>().unwrap_or(0);
    if staged.block {
        let out = run(
            "blockdev --getsize64",
            Command::new("blockdev")
                .arg("--getsize64")
                .arg(&staged.attachment.device),
        )
        .map_err(step_failed)?;
        return Ok(vec![VolumeUsage {
            available: 0,
            total: number(&String::from_utf8_lossy(&out.stdout)),
            used: 0,
            unit: Unit::Bytes as i32,
        }]);
    }
    let out = run(
        "df",
        Command::new("df")
            .args(["-B1", "--output=size,used,avail,itotal,iused,iavail"])
            .arg(path),
    )
    .map_err(step_failed)?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Vec<i64> = text
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .map(number)
        .collect();
    if v.len() < 6 {
        return Err(Status::internal(format!("df {}: {text}", path.display())));
    }
    Ok(vec![
        VolumeUsage {
            total: v[0],
            used: v[1],
            available: v[2],
            unit: Unit::Bytes as i32,
        },
        VolumeUsage {
            total: v[3],
            used: v[4],
            available: v[5],
            unit: Unit::Inodes as i32,
        },
    ])
}

/// The size of block device `device` in bytes.
fn device_bytes(device: &str) -> Result<i64, Status> {
    let out = run(
        "blockdev --getsize64",
        Command::new("blockdev").arg("--getsize64").arg(device),
    )
    .map_err(step_failed)?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .map_err(|_| Status::internal(format!("blockdev --getsize64 {device}: {text}")))
}

/// Bytes an ext2/3/4 filesystem on `device` spans (its superblock: `dumpe2fs -h`).
fn ext_bytes(device: &str) -> Result<i64, Status> {
    let out = run(
        "dumpe2fs -h",
        Command::new("dumpe2fs").arg("-h").arg(device),
    )
    .map_err(step_failed)?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    match (field("Block count:"), field("Block size:")) {
        (Some(count), Some(size)) => Ok(count * size),
        _ => Err(Status::internal(format!(
            "dumpe2fs -h {device}: no block count or size"
        ))),
    }
}

/// Before mounting: grow an ext filesystem that is smaller than its device (the volume
/// grew while not staged: offline expansion). Offline, because online growth needs
/// CAP_SYS_RESOURCE, which a node plugin's container may lack; `e2fsck -f` first, as
/// `resize2fs` requires of an unmounted filesystem.
fn grow_ext_offline(device: &str) -> Result<(), Status> {
    if ext_bytes(device)? >= device_bytes(device)? {
        return Ok(());
    }
    // e2fsck exits 1 when it fixed something: the filesystem is consistent then.
    match run("e2fsck", Command::new("e2fsck").args(["-f", "-p", device])) {
        Ok(_) => {}
        Err(e) if e.to_string().contains("exit status: 1:") => {}
        Err(e) => return Err(step_failed(e)),
    }
    run("resize2fs", Command::new("resize2fs").arg(device)).map_err(step_failed)?;
    tracing::info!(
        device,
        "grew the filesystem to its device before mounting it"
    );
    Ok(())
}

/// Grow the filesystem of `staged` to its device (a block volume: nothing to do); returns
/// the device's size. FailedPrecondition when the device is smaller than `required`.
fn grow_filesystem(staged: &Staged, required: i64) -> Result<i64, Status> {
    let device = &staged.attachment.device;
    let bytes = device_bytes(device)?;
    if bytes < required {
        return Err(Status::failed_precondition(format!(
            "volume {} is attached here at {bytes} bytes, less than the {required} asked: \
             it was grown after it was staged; unstage and stage it again (offline \
             expansion), then expand on the node",
            staged.volume
        )));
    }
    if staged.block {
        return Ok(bytes);
    }
    let grown = match filesystem_on(device).as_deref() {
        Some("xfs") => run(
            "xfs_growfs",
            Command::new("xfs_growfs").arg(&staged.staging),
        ),
        // Staging grew it already (offline) unless the device grew since.
        Some("ext4" | "ext3" | "ext2") if ext_bytes(device)? >= bytes => return Ok(bytes),
        Some("ext4" | "ext3" | "ext2") => run("resize2fs", Command::new("resize2fs").arg(device)),
        other => {
            return Err(Status::failed_precondition(format!(
                "volume {} holds {}: this node grows ext4 and xfs",
                staged.volume,
                other.unwrap_or("no filesystem")
            )))
        }
    };
    grown.map_err(step_failed)?;
    tracing::info!(volume = %staged.volume, bytes, "filesystem grown to its device");
    Ok(bytes)
}

/// Run blocking node work (tools, mounts) off the runtime's threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("node work failed: {e}")))?
}

/// The filesystem on `device`, if any (`blkid`).
fn filesystem_on(device: &str) -> Option<String> {
    let out = Command::new("blkid")
        .args(["-p", "-o", "value", "-s", "TYPE", device])
        .output()
        .ok()?;
    let fs = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!fs.is_empty()).then_some(fs)
}

/// Mount `device` (filesystem `fs`, made first if the device has none) at `at`.
fn mount_filesystem(device: &str, fs: &str, flags: &[String], at: &Path) -> Result<(), Status> {
    match filesystem_on(device) {
        Some(found) if found != fs => {
            return Err(Status::failed_precondition(format!(
                "the volume holds a {found} filesystem, not the {fs} asked for"
            )))
        }
        Some(found) if found.starts_with("ext") => grow_ext_offline(device)?,
        Some(_) => {}
        None => {
            let mkfs = format!("mkfs.{fs}");
            let mut cmd = Command::new(&mkfs);
            match fs {
                "xfs" => cmd.args(["-q", device]),
                _ => cmd.args(["-q", "-F", device]),
            };
            run("mkfs", &mut cmd).map_err(step_failed)?;
        }
    }
    let mut cmd = Command::new("mount");
    cmd.args(["-t", fs]);
    if !flags.is_empty() {
        cmd.args(["-o", &flags.join(",")]);
    }
    run("mount", cmd.arg(device).arg(at)).map_err(step_failed)?;
    Ok(())
}

/// Check a path argument: given, and absolute.
fn path_arg<'a>(field: &str, path: &'a str) -> Result<&'a Path, Status> {
    if path.is_empty() {
        return Err(missing(field));
    }
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "{field} \"{path}\" is not an absolute path"
        )));
    }
    Ok(p)
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn node_stage_volume(
        &self,
        request: Request<NodeStageVolumeRequest>,
    ) -> Result<Response<NodeStageVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(missing("volume_id"));
        }
        let staging = path_arg("staging_target_path", &req.staging_target_path)?.to_path_buf();
        let Some(cap) = req.volume_capability.clone() else {
            return Err(missing("volume_capability"));
        };
        if let Some(why) = crate::controller::unsupported(&cap) {
            return Err(Status::invalid_argument(why));
        }
        // The CO makes the staging directory; anything else there is its mistake.
        if !staging.is_dir() {
            return Err(Status::invalid_argument(format!(
                "staging_target_path {} is not a directory",
                staging.display()
            )));
        }
        let Some(template) = &self.nbd_uri else {
            return Err(Status::failed_precondition(
                "this node plugin has no NBD gateway to attach through (--nbd-uri)",
            ));
        };
        let _busy = self.busy.lock().await;
        if let Some(done) = self.staged(&req.volume_id)? {
            if done.staging == staging {
                return Ok(Response::new(NodeStageVolumeResponse {}));
            }
            return Err(Status::failed_precondition(format!(
                "volume {} is staged at {} already",
                req.volume_id,
                done.staging.display()
            )));
        }
        let read_only = matches!(
            cap.access_mode.as_ref().map(|m| m.mode()),
            Some(AccessMode::SingleNodeReaderOnly | AccessMode::MultiNodeReaderOnly)
        );
        let uri = template.replace("{volume}", &req.volume_id);
        let fuse_dir = self.state_dir.join("fuse").join(&req.volume_id);
        let volume = req.volume_id.clone();
        let staged = blocking(move || {
            let attachment = Attachment::attach(&uri, &fuse_dir, read_only).map_err(step_failed)?;
            let block = matches!(cap.access_type, Some(AccessType::Block(_)));
            if let Some(AccessType::Mount(m)) = &cap.access_type {
                let fs = if m.fs_type.is_empty() {
                    "ext4"
                } else {
                    &m.fs_type
                };
                let mut flags = m.mount_flags.clone();
                if read_only {
                    flags.push("ro".into());
                }
                if let Err(e) = mount_filesystem(&attachment.device, fs, &flags, &staging) {
                    attachment.detach();
                    return Err(e);
                }
            }
            Ok(Staged {
                volume,
                attachment,
                staging,
                block,
                read_only,
                targets: Vec::new(),
            })
        })
        .await?;
        if let Err(e) = self.save(&staged) {
            let undo = staged.clone();
            let _ = blocking(move || {
                if !undo.block {
                    basalt_attach::unmount(&undo.staging);
                }
                undo.attachment.detach();
                Ok(())
            })
            .await;
            return Err(e);
        }
        tracing::info!(volume = %staged.volume, device = %staged.attachment.device, staging = %staged.staging.display(), "volume staged");
        Ok(Response::new(NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        request: Request<NodeUnstageVolumeRequest>,
    ) -> Result<Response<NodeUnstageVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(missing("volume_id"));
        }
        let path = path_arg("staging_target_path", &req.staging_target_path)?.to_path_buf();
        let _busy = self.busy.lock().await;
        let Some(staged) = self.staged(&req.volume_id)? else {
            // Never staged here (or unstaged already): done, unless something else is
            // mounted there.
            if is_mount_point(&path) {
                return Err(Status::failed_precondition(format!(
                    "{} is a mount point this node plugin did not make: not touched",
                    path.display()
                )));
            }
            return Ok(Response::new(NodeUnstageVolumeResponse {}));
        };
        let record = self.record_path(&req.volume_id);
        blocking(move || {
            if !staged.block && is_mount_point(&staged.staging) {
                basalt_attach::unmount(&staged.staging);
            }
            staged.attachment.detach();
            std::fs::remove_file(&record)
                .map_err(|e| Status::internal(format!("remove {}: {e}", record.display())))
        })
        .await?;
        tracing::info!(volume = %req.volume_id, "volume unstaged");
        Ok(Response::new(NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        request: Request<NodePublishVolumeRequest>,
    ) -> Result<Response<NodePublishVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(missing("volume_id"));
        }
        let target = path_arg("target_path", &req.target_path)?.to_path_buf();
        let Some(cap) = req.volume_capability.as_ref() else {
            return Err(missing("volume_capability"));
        };
        if let Some(why) = crate::controller::unsupported(cap) {
            return Err(Status::invalid_argument(why));
        }
        if req.staging_target_path.is_empty() {
            return Err(missing("staging_target_path"));
        }
        let _busy = self.busy.lock().await;
        let Some(staged) = self.staged(&req.volume_id)? else {
            return Err(Status::failed_precondition(format!(
                "volume {} is not staged on this node",
                req.volume_id
            )));
        };
        if is_mount_point(&target) {
            return Ok(Response::new(NodePublishVolumeResponse {}));
        }
        let read_only = req.readonly || staged.read_only;
        let mut published = staged.clone();
        let at = target.clone();
        blocking(move || {
            let source = if staged.block {
                // The target is a file the device is bind-mounted on.
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| {
                        Status::internal(format!("create {}: {e}", parent.display()))
                    })?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&target)
                    .map_err(|e| Status::internal(format!("create {}: {e}", target.display())))?;
                PathBuf::from(&staged.attachment.device)
            } else {
                std::fs::create_dir_all(&target)
                    .map_err(|e| Status::internal(format!("create {}: {e}", target.display())))?;
                staged.staging.clone()
            };
            run(
                "mount --bind",
                Command::new("mount")
                    .arg("--bind")
                    .arg(&source)
                    .arg(&target),
            )
            .map_err(step_failed)?;
            if read_only {
                let remounted = run(
                    "remount read-only",
                    Command::new("mount")
                        .args(["-o", "remount,bind,ro"])
                        .arg(&target),
                );
                if let Err(e) = remounted {
                    basalt_attach::unmount(&target);
                    return Err(step_failed(e));
                }
            }
            Ok(())
        })
        .await?;
        published.targets.retain(|t| *t != at);
        published.targets.push(at);
        self.save(&published)?;
        Ok(Response::new(NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<NodeUnpublishVolumeRequest>,
    ) -> Result<Response<NodeUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(missing("volume_id"));
        }
        let target = path_arg("target_path", &req.target_path)?.to_path_buf();
        let _busy = self.busy.lock().await;
        if let Some(mut staged) = self.staged(&req.volume_id)? {
            if staged.targets.contains(&target) {
                staged.targets.retain(|t| *t != target);
                self.save(&staged)?;
            }
        }
        blocking(move || {
            if is_mount_point(&target) {
                basalt_attach::unmount(&target);
            }
            // The target path goes too (a directory, or a block volume's file).
            let removed = match std::fs::symlink_metadata(&target) {
                Ok(m) if m.is_dir() => std::fs::remove_dir(&target),
                Ok(_) => std::fs::remove_file(&target),
                Err(_) => Ok(()),
            };
            removed.map_err(|e| Status::internal(format!("remove {}: {e}", target.display())))
        })
        .await?;
        Ok(Response::new(NodeUnpublishVolumeResponse {}))
    }

    /// Bytes (and inodes, for a filesystem) of a volume staged here, at its staging path
    /// or one of its targets: `df` of the filesystem, or the block device's size.
    async fn node_get_volume_stats(
        &self,
        request: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        let req = request.into_inner();
        let (staged, path) = self.staged_at(&req.volume_id, &req.volume_path)?;
        let usage = blocking(move || volume_usage(&staged, &path)).await?;
        Ok(Response::new(NodeGetVolumeStatsResponse {
            usage,
            volume_condition: None,
        }))
    }

    /// Grow the filesystem of a volume staged here to its device's size (`resize2fs`,
    /// `xfs_growfs`); a block volume has nothing to grow. The device has the volume's size
    /// as of its staging (the nbdfuse path cannot grow under a mounted filesystem): a
    /// volume grown since must be staged again first — FailedPrecondition says so. Hence
    /// the plugin's expansion is OFFLINE.
    async fn node_expand_volume(
        &self,
        request: Request<NodeExpandVolumeRequest>,
    ) -> Result<Response<NodeExpandVolumeResponse>, Status> {
        let req = request.into_inner();
        let (staged, _) = self.staged_at(&req.volume_id, &req.volume_path)?;
        let required = req.capacity_range.as_ref().map_or(0, |r| r.required_bytes);
        let _busy = self.busy.lock().await;
        let capacity_bytes = blocking(move || grow_filesystem(&staged, required)).await?;
        Ok(Response::new(NodeExpandVolumeResponse { capacity_bytes }))
    }

    async fn node_get_capabilities(
        &self,
        _: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        let rpc = |t: RpcType| NodeServiceCapability {
            r#type: Some(node_service_capability::Type::Rpc(
                node_service_capability::Rpc { r#type: t as i32 },
            )),
        };
        Ok(Response::new(NodeGetCapabilitiesResponse {
            capabilities: vec![
                rpc(RpcType::StageUnstageVolume),
                rpc(RpcType::GetVolumeStats),
                rpc(RpcType::ExpandVolume),
            ],
        }))
    }

    async fn node_get_info(
        &self,
        _: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        Ok(Response::new(NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: 0,
            accessible_topology: None,
        }))
    }
}
