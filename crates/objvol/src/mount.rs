//! An objvol mounted by this host's kernel where there is no NBD driver (as here): the
//! export attached read-only as a block device (`basalt_attach`: nbdfuse and a loop device
//! with direct I/O, so no page-cache readahead into other files' blocks), and the kernel's
//! EROFS mounts it read-only. The README's recipe, for the bench and the tests; undone on
//! drop, in reverse order, so a failed run leaves no mount, loop device or FUSE file behind.

use basalt_attach::{run, Attachment};
pub use basalt_attach::{unavailable_reason, AttachError as MountError};
use std::path::{Path, PathBuf};
use std::process::Command;

/// An export mounted read-only at [`KernelMount::path`].
#[derive(Debug)]
pub struct KernelMount {
    attachment: Attachment,
    mnt: PathBuf,
    mounted: bool,
    undone: bool,
}

impl KernelMount {
    /// Mounts the export at `uri` (`nbd://HOST:PORT/objvol:NAME`), using `dir` for the FUSE
    /// file (`dir/fuse`) and the mount point (`dir/mnt`).
    pub fn new(uri: &str, dir: &Path) -> Result<Self, MountError> {
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).map_err(|e| MountError::Step {
            step: "create the mount directory",
            detail: format!("{}: {e}", mnt.display()),
        })?;
        let attachment = Attachment::attach(uri, &dir.join("fuse"), true)?;
        let mut m = KernelMount {
            attachment,
            mnt,
            mounted: false,
            undone: false,
        };
        run(
            "mount -t erofs",
            Command::new("mount")
                .args(["-t", "erofs", "-o", "ro", &m.attachment.device])
                .arg(&m.mnt),
        )?;
        m.mounted = true;
        Ok(m)
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// The loop device holding the filesystem (for `fsck.erofs`).
    pub fn device(&self) -> &str {
        &self.attachment.device
    }

    /// Unmounts now (as drop does).
    pub fn unmount(mut self) {
        self.undo();
    }

    fn undo(&mut self) {
        if std::mem::replace(&mut self.undone, true) {
            return;
        }
        if self.mounted {
            basalt_attach::unmount(&self.mnt);
        }
        self.attachment.detach();
    }
}

impl Drop for KernelMount {
    fn drop(&mut self) {
        self.undo();
    }
}
