//! VM images: a frozen layer 0 of a family of its own, cloned into volumes in O(1)
//! (docs/design.md, "Layers", "Images").
//!
//! An import creates the record (state `importing`) and the layer, the caller writes the
//! data through [`Cluster::open_image_for_import`], then [`Cluster::finish_image`] makes it
//! durable, freezes the layer and marks the image ready. Only ready images can be cloned;
//! an import that died is listed as importing and `image rm` removes it.

use crate::cluster::Cluster;
use crate::error::ClientError;
use crate::sealed::SealedLayer;
use crate::volume::Volume;
use crate::volumes::{check_name, meta_retry, unix_now, ParentRef, VolumeInfo};
use basalt_meta::Revision;
use basalt_proto::{InodeId, PoolId};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub use basalt_meta::schema::IMAGES_PREFIX;
/// Version of the image record format.
pub const IMAGE_FORMAT_VERSION: u32 = 1;

/// An image as stored in metadata (JSON, versioned).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInfo {
    pub format_version: u32,
    pub name: String,
    /// Its layer: layer 0 of a family of its own.
    pub inode: InodeId,
    pub pool: PoolId,
    pub object_size: u32,
    /// Virtual size in bytes (a multiple of 4096).
    pub size: u64,
    /// Seconds since the Unix epoch.
    pub created: u64,
    /// Where it came from ("qcow2 file disk.qcow2", "raw from stdin").
    pub source: String,
    /// `importing` until the data is durable and the layer frozen, then `ready`.
    pub state: ImageState,
    /// `image rm` is in progress: no new clone may name it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removing: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageState {
    Importing,
    Ready,
}

fn image_key(name: &str) -> String {
    format!("{IMAGES_PREFIX}{name}")
}

fn decode(bytes: &[u8]) -> Result<ImageInfo, ClientError> {
    serde_json::from_slice(bytes).map_err(|e| ClientError::Invalid {
        reason: format!("image record is unreadable: {e}"),
    })
}

fn no_such(name: &str) -> ClientError {
    ClientError::NoSuchImage { name: name.into() }
}

impl Cluster {
    async fn image_record(&self, name: &str) -> Result<(ImageInfo, Revision), ClientError> {
        let k = image_key(name);
        match meta_retry(|| self.meta().get(&k)).await? {
            Some((v, rev)) => Ok((decode(&v)?, rev)),
            None => Err(no_such(name)),
        }
    }

    async fn put_image(&self, info: &ImageInfo, rev: Revision) -> Result<Revision, ClientError> {
        let value = serde_json::to_vec(info).expect("image record serialises");
        self.meta()
            .compare_and_swap(&image_key(&info.name), rev, value)
            .await?
            .ok_or_else(|| ClientError::Invalid {
                reason: format!("image \"{}\" changed concurrently; try again", info.name),
            })
    }

    /// One image's record.
    pub async fn image_info(&self, name: &str) -> Result<ImageInfo, ClientError> {
        Ok(self.image_record(name).await?.0)
    }

    /// Every image, by name.
    pub async fn list_images(&self) -> Result<Vec<ImageInfo>, ClientError> {
        let entries = meta_retry(|| self.meta().list(IMAGES_PREFIX)).await?;
        entries.iter().map(|(_, v, _)| decode(v)).collect()
    }

    /// Start importing image `name` of `size` bytes into `pool`: its record (importing)
    /// and its layer. The data goes in through [`Cluster::open_image_for_import`].
    pub async fn begin_image(
        &self,
        name: &str,
        size: u64,
        pool: PoolId,
        source: &str,
    ) -> Result<ImageInfo, ClientError> {
        check_name(name).map_err(|_| ClientError::Invalid {
            reason: format!(
                "image name \"{name}\" must be 1 to 128 letters, digits, '.', '_' or '-', \
                 not starting with '.' or '-'"
            ),
        })?;
        let layer = self.new_sealed_layer(pool, size).await?;
        if self.meta().get(&image_key(name)).await?.is_some() {
            return Err(ClientError::Exists {
                what: format!("image \"{name}\""),
            });
        }
        let info = ImageInfo {
            format_version: IMAGE_FORMAT_VERSION,
            name: name.to_string(),
            inode: layer.inode,
            pool,
            object_size: layer.object_size,
            size,
            created: unix_now(),
            source: source.to_string(),
            state: ImageState::Importing,
            removing: false,
        };
        if self.put_image(&info, 0).await.is_err() {
            return Err(ClientError::Exists {
                what: format!("image \"{name}\""),
            });
        }
        Ok(info)
    }

    /// A writable handle on an image being imported (refused once it is ready).
    pub async fn open_image_for_import(
        self: &Arc<Self>,
        name: &str,
    ) -> Result<Volume, ClientError> {
        let (info, _) = self.image_record(name).await?;
        if info.state != ImageState::Importing || info.removing {
            return Err(ClientError::ReadOnly {
                what: format!("image \"{name}\""),
            });
        }
        self.open_layer_for_writing(&layer_of(&info), &format!("image:{name}"))
    }

    /// A read-only handle on a ready image.
    pub async fn open_image(self: &Arc<Self>, name: &str) -> Result<Volume, ClientError> {
        let (info, _) = self.image_record(name).await?;
        if info.state != ImageState::Ready || info.removing {
            return Err(no_such(name));
        }
        self.open_sealed_layer(&layer_of(&info), &format!("image:{name}"), info.created)
    }

    /// End an import: make the data durable, freeze the layer, mark the image ready.
    pub async fn finish_image(&self, name: &str) -> Result<ImageInfo, ClientError> {
        let (mut info, rev) = self.image_record(name).await?;
        if info.state == ImageState::Ready {
            return Ok(info);
        }
        self.seal_layer(&layer_of(&info)).await?;
        info.state = ImageState::Ready;
        self.put_image(&info, rev).await?;
        Ok(info)
    }

    /// Create volume `new` as a clone of image `image` (O(1)).
    pub async fn clone_image(&self, image: &str, new: &str) -> Result<VolumeInfo, ClientError> {
        check_name(new)?;
        let (img, _) = self.image_record(image).await?;
        if img.state != ImageState::Ready || img.removing {
            return Err(ClientError::Invalid {
                reason: format!(
                    "image \"{image}\" is {}; only a ready image can be cloned",
                    if img.removing {
                        "being removed"
                    } else {
                        "still importing"
                    }
                ),
            });
        }
        let of = crate::snapshots::CloneOf {
            parent: ParentRef {
                volume: String::new(),
                snapshot: String::new(),
                inode: img.inode,
                image: Some(image.to_string()),
            },
            size: img.size,
            pool: img.pool,
            object_size: img.object_size,
        };
        // `image rm` may have marked it meanwhile without seeing this clone: undo.
        let still = || async {
            self.image_record(image)
                .await
                .ok()
                .map(|(i, _)| !i.removing && i.inode == img.inode)
                == Some(true)
        };
        self.create_clone(new, of, still)
            .await?
            .ok_or_else(|| no_such(image))
    }

    /// Remove image `name` and its data; refused while volumes are clones of it.
    pub async fn remove_image(&self, name: &str) -> Result<(), ClientError> {
        let (mut info, mut rev) = self.image_record(name).await?;
        if !info.removing {
            info.removing = true;
            rev = self.put_image(&info, rev).await?;
        }
        let clones = self.clones_of(&[info.inode]).await?;
        if !clones.is_empty() {
            info.removing = false;
            let _ = self.put_image(&info, rev).await;
            return Err(ClientError::Invalid {
                reason: format!(
                    "image \"{name}\" is used by {}; remove or flatten them first",
                    clones.join(", ")
                ),
            });
        }
        self.purge(info.inode, 0).await?;
        self.flush().await?;
        if !self
            .meta()
            .compare_and_delete(&image_key(name), rev)
            .await?
        {
            return Err(ClientError::Invalid {
                reason: format!("image \"{name}\" changed concurrently; try again"),
            });
        }
        Ok(())
    }
}

/// The layer that holds an image.
fn layer_of(info: &ImageInfo) -> SealedLayer {
    SealedLayer {
        inode: info.inode,
        pool: info.pool,
        object_size: info.object_size,
        size: info.size,
    }
}
