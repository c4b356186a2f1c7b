//! The CSI Controller service: volumes and snapshots in the cluster (docs/design.md,
//! "Kubernetes: the CSI driver").

use crate::errors::{missing, status};
use crate::proto::controller_server::Controller;
use crate::proto::controller_service_capability::rpc::Type as RpcType;
use crate::proto::volume_capability::access_mode::Mode as AccessMode;
use crate::proto::volume_capability::AccessType;
use crate::proto::volume_content_source::Type as SourceType;
use crate::proto::*;
use basalt_client::volumes::{SnapshotInfo, VolumeInfo};
use basalt_client::{ClientError, Cluster};
use std::collections::HashMap;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The size of a volume whose request names none.
pub const DEFAULT_SIZE_BYTES: u64 = 1 << 30;
/// Volume sizes are rounded up to this.
pub const SIZE_STEP_BYTES: u64 = 1 << 20;
/// The StorageClass parameter naming the pool.
pub const POOL_PARAMETER: &str = "pool";
/// Parameters the Kubernetes sidecars own (they pass some through; none is ours to refuse).
const SIDECAR_PREFIX: &str = "csi.storage.k8s.io/";
/// Filesystems the node side makes.
pub const FILESYSTEMS: [&str; 2] = ["ext4", "xfs"];
/// Prefix of a ListVolumes/ListSnapshots token: the last name returned follows.
const TOKEN_PREFIX: &str = "after:";

/// The Controller service of one cluster.
pub struct ControllerService {
    cluster: Arc<Cluster>,
    /// The pool of volumes whose StorageClass names none.
    default_pool: String,
}

impl ControllerService {
    pub fn new(cluster: Arc<Cluster>, default_pool: String) -> Self {
        Self {
            cluster,
            default_pool,
        }
    }

    /// The pool `parameters` name (or the default), its id; any parameter Basalt does not
    /// know is refused, never ignored.
    fn pool_of(&self, parameters: &HashMap<String, String>) -> Result<(String, u32), Status> {
        for key in parameters.keys() {
            if key != POOL_PARAMETER && !key.starts_with(SIDECAR_PREFIX) {
                return Err(Status::invalid_argument(format!(
                    "unknown StorageClass parameter \"{key}\" (Basalt takes: {POOL_PARAMETER})"
                )));
            }
        }
        let name = parameters
            .get(POOL_PARAMETER)
            .cloned()
            .unwrap_or_else(|| self.default_pool.clone());
        let map = self.cluster.map();
        let id = map
            .pools
            .values()
            .find(|p| p.name == name)
            .map(|p| p.id)
            .ok_or_else(|| Status::invalid_argument(format!("pool \"{name}\" does not exist")))?;
        Ok((name, id))
    }

    /// The bytes pool `pool_id` holds: the raw capacity of the OSDs that answered (and
    /// what of it is free), divided by the copies each byte takes.
    async fn pool_bytes(&self, pool_id: u32) -> Result<(u64, u64), Status> {
        let report = basalt_client::status::gather_for_events(&self.cluster)
            .await
            .map_err(status)?;
        let totals = report.capacity();
        let free = totals.raw_bytes.saturating_sub(totals.used_bytes);
        let map = self.cluster.map();
        let usable = |raw: u64| match map.pools.get(&pool_id) {
            Some(p) => match p.ec {
                Some(ec) => raw / (ec.k + ec.m) as u64 * ec.k as u64,
                None => raw / p.size.max(1) as u64,
            },
            None => 0,
        };
        Ok((usable(totals.raw_bytes), usable(free)))
    }

    /// The volume of `volume_id`, None when there is none.
    async fn find_volume(&self, volume_id: &str) -> Result<Option<VolumeInfo>, Status> {
        match self.cluster.volume_info(volume_id).await {
            Ok(info) => Ok(Some(info)),
            Err(ClientError::NoSuchVolume { .. }) => Ok(None),
            Err(e) => Err(status(e)),
        }
    }

    /// The volumes holding a snapshot named `name` (a CSI snapshot id), with it.
    async fn find_snapshot(&self, name: &str) -> Result<Vec<(VolumeInfo, SnapshotInfo)>, Status> {
        let volumes = self.cluster.list_volumes().await.map_err(status)?;
        Ok(volumes
            .into_iter()
            .filter_map(|v| {
                let snap = v.snapshot(name).filter(|s| !s.removing).cloned()?;
                Some((v, snap))
            })
            .collect())
    }

    /// The one snapshot `id` names: None when none does; FailedPrecondition when snapshots
    /// of that name exist on several volumes (made outside CSI).
    async fn snapshot_by_id(&self, id: &str) -> Result<Option<(VolumeInfo, SnapshotInfo)>, Status> {
        let mut found = self.find_snapshot(id).await?;
        match found.len() {
            0 => Ok(None),
            1 => Ok(found.pop()),
            _ => Err(Status::failed_precondition(format!(
                "snapshot \"{id}\" exists on volumes {}: a CSI snapshot id names one",
                found
                    .iter()
                    .map(|(v, _)| v.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }
}

/// The size a capacity range asks for: `required_bytes` (else the default, capped at
/// `limit_bytes`) rounded up to [`SIZE_STEP_BYTES`]; OutOfRange when that passes the limit.
pub fn size_for(range: Option<&CapacityRange>) -> Result<u64, Status> {
    let (required, limit) = range.map_or((0, 0), |r| (r.required_bytes, r.limit_bytes));
    if required < 0 || limit < 0 {
        return Err(Status::invalid_argument(
            "capacity_range: required_bytes and limit_bytes may not be negative",
        ));
    }
    let (required, limit) = (required as u64, limit as u64);
    if limit > 0 && required > limit {
        return Err(Status::out_of_range(format!(
            "capacity_range: required_bytes {required} is above limit_bytes {limit}"
        )));
    }
    let want = match (required, limit) {
        (0, 0) => DEFAULT_SIZE_BYTES,
        (0, limit) => DEFAULT_SIZE_BYTES.min(limit),
        (required, _) => required,
    };
    let size = want.div_ceil(SIZE_STEP_BYTES) * SIZE_STEP_BYTES;
    if limit > 0 && size > limit {
        return Err(Status::out_of_range(format!(
            "volumes are sized in steps of {SIZE_STEP_BYTES} bytes: {size} is above \
             limit_bytes {limit}"
        )));
    }
    Ok(size)
}

/// Does `size` satisfy `range`?
fn fits(size: u64, range: Option<&CapacityRange>) -> bool {
    let Some(r) = range else { return true };
    size >= r.required_bytes.max(0) as u64 && (r.limit_bytes <= 0 || size <= r.limit_bytes as u64)
}

/// Why Basalt cannot give a volume `cap`, or None when it can: an access mode with
/// writers on several nodes (no cluster filesystem; two writers of one block device
/// corrupt it), a filesystem the node side does not make, a capability with no access
/// type or mode.
pub fn unsupported(cap: &VolumeCapability) -> Option<String> {
    let mode = cap.access_mode.as_ref().map(|m| m.mode());
    match mode {
        None => return Some("a volume capability has no access mode".into()),
        Some(AccessMode::Unknown) => return Some("access mode UNKNOWN".into()),
        Some(m @ (AccessMode::MultiNodeSingleWriter | AccessMode::MultiNodeMultiWriter)) => {
            return Some(format!(
                "access mode {}: a Basalt volume has one writer node at a time (block or \
                 filesystem alike)",
                m.as_str_name()
            ))
        }
        Some(_) => {}
    }
    match &cap.access_type {
        None => Some("a volume capability has no access type (block or mount)".into()),
        Some(AccessType::Block(_)) => None,
        Some(AccessType::Mount(m)) if !m.volume_mount_group.is_empty() => Some(
            "volume_mount_group: Basalt's node plugin does not offer VOLUME_MOUNT_GROUP".into(),
        ),
        Some(AccessType::Mount(m)) => {
            let fs = m.fs_type.as_str();
            (!fs.is_empty() && !FILESYSTEMS.contains(&fs)).then(|| {
                format!(
                    "filesystem \"{fs}\" is not made by Basalt's node plugin (it makes {})",
                    FILESYSTEMS.join(", ")
                )
            })
        }
    }
}

/// Refuse an empty capability list or any capability Basalt cannot give.
fn check_capabilities(caps: &[VolumeCapability]) -> Result<(), Status> {
    if caps.is_empty() {
        return Err(missing("volume_capabilities"));
    }
    match caps.iter().find_map(unsupported) {
        Some(why) => Err(Status::invalid_argument(why)),
        None => Ok(()),
    }
}

fn csi_volume(info: &VolumeInfo, pool: &str, source: Option<VolumeContentSource>) -> Volume {
    Volume {
        capacity_bytes: info.size as i64,
        volume_id: info.name.clone(),
        volume_context: HashMap::from([(POOL_PARAMETER.to_string(), pool.to_string())]),
        content_source: source,
        accessible_topology: Vec::new(),
    }
}

fn csi_snapshot(volume: &VolumeInfo, snap: &SnapshotInfo) -> Snapshot {
    Snapshot {
        size_bytes: snap.size as i64,
        snapshot_id: snap.name.clone(),
        source_volume_id: volume.name.clone(),
        creation_time: Some(prost_types::Timestamp {
            seconds: snap.created as i64,
            nanos: 0,
        }),
        ready_to_use: true,
        group_snapshot_id: String::new(),
    }
}

/// The page of `names` (sorted) after `token`, at most `max` (0: all), and the next token.
fn page<T>(
    mut entries: Vec<(String, T)>,
    token: &str,
    max: i32,
) -> Result<(Vec<T>, String), Status> {
    if max < 0 {
        return Err(Status::invalid_argument("max_entries may not be negative"));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let after = match token {
        "" => None,
        t => Some(t.strip_prefix(TOKEN_PREFIX).ok_or_else(|| {
            Status::aborted(format!(
                "starting_token \"{t}\" is not one this driver gave"
            ))
        })?),
    };
    let mut rest: Vec<(String, T)> = entries
        .into_iter()
        .filter(|(name, _)| after.is_none_or(|a| name.as_str() > a))
        .collect();
    let mut next = String::new();
    if max > 0 && rest.len() > max as usize {
        rest.truncate(max as usize);
        next = format!("{TOKEN_PREFIX}{}", rest[rest.len() - 1].0);
    }
    Ok((rest.into_iter().map(|e| e.1).collect(), next))
}

const CAPABILITIES: [RpcType; 6] = [
    RpcType::CreateDeleteVolume,
    RpcType::CreateDeleteSnapshot,
    RpcType::ListVolumes,
    RpcType::ListSnapshots,
    RpcType::GetCapacity,
    RpcType::ExpandVolume,
];

#[tonic::async_trait]
impl Controller for ControllerService {
    async fn create_volume(
        &self,
        request: Request<CreateVolumeRequest>,
    ) -> Result<Response<CreateVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.name.is_empty() {
            return Err(missing("name"));
        }
        basalt_client::volumes::check_name(&req.name).map_err(status)?;
        check_capabilities(&req.volume_capabilities)?;
        if !req.mutable_parameters.is_empty() {
            return Err(Status::invalid_argument(
                "mutable_parameters: Basalt has no volume attribute classes",
            ));
        }
        let (pool, pool_id) = self.pool_of(&req.parameters)?;
        let size = size_for(req.capacity_range.as_ref())?;
        let range = req.capacity_range.as_ref();
        let source = match req
            .volume_content_source
            .as_ref()
            .and_then(|s| s.r#type.as_ref())
        {
            None => None,
            Some(SourceType::Snapshot(s)) => {
                if s.snapshot_id.is_empty() {
                    return Err(missing("volume_content_source.snapshot.snapshot_id"));
                }
                let Some(found) = self.snapshot_by_id(&s.snapshot_id).await? else {
                    return Err(Status::not_found(format!(
                        "snapshot \"{}\" does not exist",
                        s.snapshot_id
                    )));
                };
                Some(found)
            }
            Some(SourceType::Volume(_)) => {
                return Err(Status::invalid_argument(
                    "a volume as the source is not offered (CLONE_VOLUME): take a snapshot \
                     of it and create the volume from the snapshot",
                ))
            }
        };
        let echo = req.volume_content_source.clone();
        if let Some(existing) = self.find_volume(&req.name).await? {
            let same_source = match (&source, &existing.parent) {
                (None, None) => true,
                (Some((v, s)), Some(p)) => p.volume == v.name && p.snapshot == s.name,
                _ => false,
            };
            if existing.pool == pool_id && fits(existing.size, range) && same_source {
                return Ok(Response::new(CreateVolumeResponse {
                    volume: Some(csi_volume(&existing, &pool, echo)),
                }));
            }
            return Err(Status::already_exists(format!(
                "volume \"{}\" exists with another size ({} bytes), pool or source",
                req.name, existing.size
            )));
        }
        // Volumes are thin (space is taken as they are written), but one larger than the
        // pool could ever hold is a mistake.
        let (total, _) = self.pool_bytes(pool_id).await?;
        if size > total {
            let human = basalt_proto::size::human_bytes;
            return Err(Status::out_of_range(format!(
                "{} is more than pool \"{pool}\" can ever hold ({} on its OSDs now)",
                human(size),
                human(total)
            )));
        }
        let info = match &source {
            None => self
                .cluster
                .create_volume(&req.name, size, pool_id)
                .await
                .map_err(status)?,
            Some((volume, snap)) => {
                if volume.pool != pool_id {
                    return Err(Status::invalid_argument(format!(
                        "snapshot \"{}\" is of a volume in another pool than \"{pool}\": a \
                         clone stays in its snapshot's pool",
                        snap.name
                    )));
                }
                if size < snap.size && req.capacity_range.is_some() {
                    return Err(Status::out_of_range(format!(
                        "snapshot \"{}\" holds {} bytes: a volume made from it cannot be \
                         smaller",
                        snap.name, snap.size
                    )));
                }
                let clone = self
                    .cluster
                    .clone_snapshot(&volume.name, &snap.name, &req.name)
                    .await
                    .map_err(status)?;
                if size > clone.size && req.capacity_range.is_some() {
                    self.cluster
                        .resize_volume(&req.name, size, false)
                        .await
                        .map_err(status)?
                } else {
                    clone
                }
            }
        };
        tracing::info!(volume = %info.name, pool, size = info.size, "CSI volume created");
        Ok(Response::new(CreateVolumeResponse {
            volume: Some(csi_volume(&info, &pool, echo)),
        }))
    }

    async fn delete_volume(
        &self,
        request: Request<DeleteVolumeRequest>,
    ) -> Result<Response<DeleteVolumeResponse>, Status> {
        let id = request.into_inner().volume_id;
        if id.is_empty() {
            return Err(missing("volume_id"));
        }
        let Some(info) = self.find_volume(&id).await? else {
            return Ok(Response::new(DeleteVolumeResponse {}));
        };
        // A writer-lock fence's hidden layer goes with the volume; snapshots users took
        // must be deleted first.
        let names: Vec<&str> = info
            .snapshots
            .iter()
            .map(|s| s.name.as_str())
            .filter(|s| !basalt_client::is_fence_snapshot(s))
            .collect();
        if !names.is_empty() {
            return Err(Status::failed_precondition(format!(
                "volume \"{id}\" has snapshots ({}): delete them first",
                names.join(", ")
            )));
        }
        match self.cluster.remove_volume_unless_open(&id, false).await {
            Ok(()) | Err(ClientError::NoSuchVolume { .. }) => {
                tracing::info!(volume = %id, "CSI volume deleted");
                Ok(Response::new(DeleteVolumeResponse {}))
            }
            Err(e) => Err(status(e)),
        }
    }

    async fn controller_publish_volume(
        &self,
        _: Request<ControllerPublishVolumeRequest>,
    ) -> Result<Response<ControllerPublishVolumeResponse>, Status> {
        Err(Status::unimplemented(
            "ControllerPublishVolume: Basalt nodes attach volumes themselves",
        ))
    }

    async fn controller_unpublish_volume(
        &self,
        _: Request<ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<ControllerUnpublishVolumeResponse>, Status> {
        Err(Status::unimplemented(
            "ControllerUnpublishVolume: Basalt nodes attach volumes themselves",
        ))
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<ValidateVolumeCapabilitiesResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(missing("volume_id"));
        }
        if req.volume_capabilities.is_empty() {
            return Err(missing("volume_capabilities"));
        }
        if self.find_volume(&req.volume_id).await?.is_none() {
            return Err(Status::not_found(format!(
                "volume \"{}\" does not exist",
                req.volume_id
            )));
        }
        if let Some(why) = req.volume_capabilities.iter().find_map(unsupported) {
            return Ok(Response::new(ValidateVolumeCapabilitiesResponse {
                confirmed: None,
                message: why,
            }));
        }
        Ok(Response::new(ValidateVolumeCapabilitiesResponse {
            confirmed: Some(validate_volume_capabilities_response::Confirmed {
                volume_context: req.volume_context,
                volume_capabilities: req.volume_capabilities,
                parameters: req.parameters,
                mutable_parameters: HashMap::new(),
            }),
            message: String::new(),
        }))
    }

    async fn list_volumes(
        &self,
        request: Request<ListVolumesRequest>,
    ) -> Result<Response<ListVolumesResponse>, Status> {
        let req = request.into_inner();
        let map = self.cluster.map();
        let volumes = self.cluster.list_volumes().await.map_err(status)?;
        let entries = volumes
            .into_iter()
            .map(|v| {
                let pool = map
                    .pools
                    .get(&v.pool)
                    .map(|p| p.name.clone())
                    .unwrap_or_default();
                (v.name.clone(), csi_volume(&v, &pool, None))
            })
            .collect();
        let (volumes, next_token) = page(entries, &req.starting_token, req.max_entries)?;
        Ok(Response::new(ListVolumesResponse {
            entries: volumes
                .into_iter()
                .map(|volume| list_volumes_response::Entry {
                    volume: Some(volume),
                    status: None,
                })
                .collect(),
            next_token,
        }))
    }

    async fn get_capacity(
        &self,
        request: Request<GetCapacityRequest>,
    ) -> Result<Response<GetCapacityResponse>, Status> {
        let req = request.into_inner();
        let (_, pool_id) = self.pool_of(&req.parameters)?;
        if let Some(why) = req.volume_capabilities.iter().find_map(unsupported) {
            return Err(Status::invalid_argument(why));
        }
        let (_, available) = self.pool_bytes(pool_id).await?;
        Ok(Response::new(GetCapacityResponse {
            available_capacity: available as i64,
            maximum_volume_size: None,
            minimum_volume_size: Some(SIZE_STEP_BYTES as i64),
        }))
    }

    async fn controller_get_capabilities(
        &self,
        _: Request<ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<ControllerGetCapabilitiesResponse>, Status> {
        let capabilities = CAPABILITIES
            .iter()
            .map(|t| ControllerServiceCapability {
                r#type: Some(controller_service_capability::Type::Rpc(
                    controller_service_capability::Rpc { r#type: *t as i32 },
                )),
            })
            .collect();
        Ok(Response::new(ControllerGetCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn create_snapshot(
        &self,
        request: Request<CreateSnapshotRequest>,
    ) -> Result<Response<CreateSnapshotResponse>, Status> {
        let req = request.into_inner();
        if req.name.is_empty() {
            return Err(missing("name"));
        }
        if req.source_volume_id.is_empty() {
            return Err(missing("source_volume_id"));
        }
        if !req.parameters.keys().all(|k| k.starts_with(SIDECAR_PREFIX)) {
            return Err(Status::invalid_argument(
                "Basalt snapshots take no parameters (VolumeSnapshotClass)",
            ));
        }
        basalt_client::check_snapshot_name(&req.name).map_err(status)?;
        if let Some((volume, snap)) = self.snapshot_by_id(&req.name).await? {
            if volume.name == req.source_volume_id {
                return Ok(Response::new(CreateSnapshotResponse {
                    snapshot: Some(csi_snapshot(&volume, &snap)),
                }));
            }
            return Err(Status::already_exists(format!(
                "snapshot \"{}\" exists, of volume \"{}\"",
                req.name, volume.name
            )));
        }
        let Some(_) = self.find_volume(&req.source_volume_id).await? else {
            return Err(Status::not_found(format!(
                "volume \"{}\" does not exist",
                req.source_volume_id
            )));
        };
        let snap = self
            .cluster
            .snapshot_volume(&req.source_volume_id, &req.name)
            .await
            .map_err(status)?;
        let volume = self
            .cluster
            .volume_info(&req.source_volume_id)
            .await
            .map_err(status)?;
        tracing::info!(volume = %volume.name, snapshot = %snap.name, "CSI snapshot created");
        Ok(Response::new(CreateSnapshotResponse {
            snapshot: Some(csi_snapshot(&volume, &snap)),
        }))
    }

    async fn delete_snapshot(
        &self,
        request: Request<DeleteSnapshotRequest>,
    ) -> Result<Response<DeleteSnapshotResponse>, Status> {
        let id = request.into_inner().snapshot_id;
        if id.is_empty() {
            return Err(missing("snapshot_id"));
        }
        let Some((volume, snap)) = self.snapshot_by_id(&id).await? else {
            return Ok(Response::new(DeleteSnapshotResponse {}));
        };
        let clones = self
            .cluster
            .clones_of(&[snap.inode])
            .await
            .map_err(status)?;
        if !clones.is_empty() {
            return Err(Status::failed_precondition(format!(
                "snapshot \"{id}\" has clones ({}): delete them first",
                clones.join(", ")
            )));
        }
        match self
            .cluster
            .remove_snapshot(&volume.name, &snap.name, &|_, _| {})
            .await
        {
            Ok(()) | Err(ClientError::NoSuchSnapshot { .. }) => {
                Ok(Response::new(DeleteSnapshotResponse {}))
            }
            Err(e) => Err(status(e)),
        }
    }

    async fn list_snapshots(
        &self,
        request: Request<ListSnapshotsRequest>,
    ) -> Result<Response<ListSnapshotsResponse>, Status> {
        let req = request.into_inner();
        let volumes = self.cluster.list_volumes().await.map_err(status)?;
        let entries = volumes
            .iter()
            .filter(|v| req.source_volume_id.is_empty() || v.name == req.source_volume_id)
            .flat_map(|v| {
                v.snapshots
                    .iter()
                    .filter(|s| !s.removing && !basalt_client::is_fence_snapshot(&s.name))
                    .filter(|s| req.snapshot_id.is_empty() || s.name == req.snapshot_id)
                    .map(move |s| (s.name.clone(), csi_snapshot(v, s)))
            })
            .collect();
        let (snapshots, next_token) = page(entries, &req.starting_token, req.max_entries)?;
        Ok(Response::new(ListSnapshotsResponse {
            entries: snapshots
                .into_iter()
                .map(|s| list_snapshots_response::Entry { snapshot: Some(s) })
                .collect(),
            next_token,
        }))
    }

    async fn get_snapshot(
        &self,
        _: Request<GetSnapshotRequest>,
    ) -> Result<Response<GetSnapshotResponse>, Status> {
        Err(Status::unimplemented(
            "GetSnapshot: not offered (ListSnapshots is)",
        ))
    }

    async fn controller_expand_volume(
        &self,
        request: Request<ControllerExpandVolumeRequest>,
    ) -> Result<Response<ControllerExpandVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(missing("volume_id"));
        }
        let Some(range) = req.capacity_range.as_ref() else {
            return Err(missing("capacity_range"));
        };
        let Some(info) = self.find_volume(&req.volume_id).await? else {
            return Err(Status::not_found(format!(
                "volume \"{}\" does not exist",
                req.volume_id
            )));
        };
        let size = size_for(Some(range))?;
        let info = if size > info.size {
            self.cluster
                .resize_volume(&req.volume_id, size, false)
                .await
                .map_err(status)?
        } else {
            info
        };
        // A filesystem on it grows on the node (NodeExpandVolume); a raw block device
        // needs nothing more.
        let block = matches!(
            req.volume_capability
                .as_ref()
                .and_then(|c| c.access_type.as_ref()),
            Some(AccessType::Block(_))
        );
        Ok(Response::new(ControllerExpandVolumeResponse {
            capacity_bytes: info.size as i64,
            node_expansion_required: !block,
        }))
    }

    async fn controller_get_volume(
        &self,
        _: Request<ControllerGetVolumeRequest>,
    ) -> Result<Response<ControllerGetVolumeResponse>, Status> {
        Err(Status::unimplemented("ControllerGetVolume: not offered"))
    }

    async fn controller_modify_volume(
        &self,
        _: Request<ControllerModifyVolumeRequest>,
    ) -> Result<Response<ControllerModifyVolumeResponse>, Status> {
        Err(Status::unimplemented(
            "ControllerModifyVolume: Basalt has no volume attribute classes",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: sizes round up to whole MiB within the range; a range that cannot be met is
    /// OutOfRange; nonsense is InvalidArgument.
    #[test]
    fn capacity_ranges_round_within_their_limit() {
        let range = |required: i64, limit: i64| CapacityRange {
            required_bytes: required,
            limit_bytes: limit,
        };
        assert_eq!(size_for(None).unwrap(), DEFAULT_SIZE_BYTES);
        assert_eq!(size_for(Some(&range(1, 0))).unwrap(), SIZE_STEP_BYTES);
        assert_eq!(size_for(Some(&range(0, 10 << 20))).unwrap(), 10 << 20);
        assert_eq!(size_for(Some(&range(5 << 30, 5 << 30))).unwrap(), 5 << 30);
        let code = |r: CapacityRange| size_for(Some(&r)).unwrap_err().code();
        assert_eq!(code(range(3, 2)), tonic::Code::OutOfRange);
        assert_eq!(code(range(1, 1000)), tonic::Code::OutOfRange);
        assert_eq!(code(range(-1, 0)), tonic::Code::InvalidArgument);
    }

    /// Goal: single-node writers and multi-node readers are given, in block or mount mode;
    /// a multi-node writer, an unknown filesystem or a capability without mode or type is
    /// not, with the reason.
    #[test]
    fn access_modes_basalt_gives() {
        let cap = |mode: AccessMode, access: AccessType| VolumeCapability {
            access_mode: Some(volume_capability::AccessMode { mode: mode as i32 }),
            access_type: Some(access),
        };
        let block = || AccessType::Block(volume_capability::BlockVolume {});
        let mount = |fs: &str| {
            AccessType::Mount(volume_capability::MountVolume {
                fs_type: fs.into(),
                ..Default::default()
            })
        };
        for mode in [
            AccessMode::SingleNodeWriter,
            AccessMode::SingleNodeReaderOnly,
            AccessMode::MultiNodeReaderOnly,
            AccessMode::SingleNodeSingleWriter,
            AccessMode::SingleNodeMultiWriter,
        ] {
            assert_eq!(unsupported(&cap(mode, block())), None, "{mode:?}");
            assert_eq!(unsupported(&cap(mode, mount("ext4"))), None, "{mode:?}");
        }
        let why = unsupported(&cap(AccessMode::MultiNodeMultiWriter, block())).unwrap();
        assert!(why.contains("one writer node"), "{why}");
        let group = AccessType::Mount(volume_capability::MountVolume {
            volume_mount_group: "1000".into(),
            ..Default::default()
        });
        let why = unsupported(&cap(AccessMode::SingleNodeWriter, group)).unwrap();
        assert!(why.contains("VOLUME_MOUNT_GROUP"), "{why}");
        let why = unsupported(&cap(AccessMode::SingleNodeWriter, mount("zfs"))).unwrap();
        assert!(why.contains("zfs"), "{why}");
        let none = VolumeCapability {
            access_mode: None,
            access_type: Some(block()),
        };
        assert!(unsupported(&none).is_some());
    }

    /// Goal: pages follow the names in order, the token names the last one returned (it
    /// may be deleted meanwhile), and a token this driver did not give is ABORTED.
    #[test]
    fn pages_follow_names() {
        let names = |v: &[&str]| v.iter().map(|n| (n.to_string(), n.to_string())).collect();
        let (first, token) = page(names(&["c", "a", "b"]), "", 2).unwrap();
        assert_eq!(first, ["a", "b"]);
        assert_eq!(token, "after:b");
        let (rest, token) = page(names(&["a", "c", "d"]), "after:b", 2).unwrap();
        assert_eq!(
            (rest, token.as_str()),
            (vec!["c".to_string(), "d".into()], "")
        );
        let err = page(names(&["a"]), "invalid-token", 0).unwrap_err();
        assert_eq!(err.code(), tonic::Code::Aborted);
        assert_eq!(
            page(names(&["a"]), "", -1).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }
}
