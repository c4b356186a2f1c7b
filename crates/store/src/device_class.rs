//! Which class of device a store lives on (`nvme`, `ssd`, `hdd`), from what the kernel says
//! of the block device under it: pools can then keep to one class (`--device-class`).

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// A detected device class and how it was found (for the OSD's startup line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetectedClass {
    /// `nvme`, `ssd` or `hdd`.
    pub class: &'static str,
    /// What the class was read from ("/var/lib/basalt/osd.3 is on nvme0n1").
    pub reason: String,
}

/// The class of the device holding `path`: the block device itself when `path` is one,
/// else the device of the filesystem it is on. An NVMe namespace is `nvme`; a device the
/// kernel calls rotational is `hdd`; anything else is `ssd`, and so is a path on no block
/// device (tmpfs), which says so in the reason.
pub fn detect_device_class(path: &Path) -> DetectedClass {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            return DetectedClass {
                class: "ssd",
                reason: format!("{} unreadable ({e}): taken as ssd", path.display()),
            }
        }
    };
    let dev = if meta.file_type().is_block_device() {
        meta.rdev()
    } else {
        meta.dev()
    };
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let Some(disk) = whole_disk(Path::new(&format!("/sys/dev/block/{major}:{minor}"))) else {
        return DetectedClass {
            class: "ssd",
            reason: format!(
                "{} is on no block device (device {major}:{minor}, tmpfs or similar): taken as ssd",
                path.display()
            ),
        };
    };
    let name = disk
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let rotational = std::fs::read_to_string(disk.join("queue/rotational"))
        .map(|s| s.trim() == "1")
        .unwrap_or(false);
    let class = if name.starts_with("nvme") {
        "nvme"
    } else if rotational {
        "hdd"
    } else {
        "ssd"
    };
    let reason = format!(
        "{} is on {name}{}",
        path.display(),
        if rotational { " (rotational)" } else { "" }
    );
    DetectedClass { class, reason }
}

/// The sysfs directory of the whole disk of a block device's sysfs link (a partition's
/// parent); None when there is none.
fn whole_disk(link: &Path) -> Option<PathBuf> {
    let dir = std::fs::canonicalize(link).ok()?;
    if dir.join("partition").exists() {
        return dir.parent().map(Path::to_path_buf);
    }
    Some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a path on tmpfs is on no block device (ssd, saying why); a path on a disk names
    /// that disk; a missing path is not an error.
    #[test]
    fn classes_follow_the_kernel() {
        let shm = detect_device_class(Path::new("/dev/shm"));
        assert_eq!(shm.class, "ssd");
        assert!(shm.reason.contains("no block device"), "{}", shm.reason);
        let missing = detect_device_class(Path::new("/nonexistent/basalt"));
        assert_eq!(missing.class, "ssd");
        assert!(missing.reason.contains("unreadable"), "{}", missing.reason);
        // The root filesystem of this machine is on a disk: the reason names it.
        let root = detect_device_class(Path::new("/"));
        assert!(root.reason.contains(" is on "), "{}", root.reason);
    }
}
