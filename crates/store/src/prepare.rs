//! Making a block device into a store (`basalt disk prepare`) and finding the devices that
//! hold one (`basalt disk ls`); docs/design.md, "Raw block devices".
//!
//! `prepare` refuses, naming the device and the reason and writing nothing, a device that
//! is in use or holds something: mounted or held (`/proc/self/mountinfo`, sysfs holders,
//! `O_EXCL`), a partition table, a filesystem, swap, LVM, LUKS or bcache signature, another
//! Basalt store, too small, or with sectors over 4 KiB. `--force` (`PrepareOptions::force`)
//! overrides only the partition-table and signature checks.

use crate::medium::{BlockDevice, DeviceError, MIN_DEVICE_BYTES};
use crate::options::{IoOptions, StoreOptions, DEFAULT_OBJECT_BYTES};
use crate::superblock::{has_magic, StoreLayout, SUPERBLOCK_BYTES};
use crate::StoreError;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Bytes read from the start of a device to look for signatures: up to btrfs's
/// superblock magic at 65600, rounded up to whole 4 KiB blocks.
const PROBE_BYTES: usize = 17 * 4096;

/// What `basalt disk prepare` is asked to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareOptions {
    /// Overwrite a partition table or a filesystem, swap, LVM, LUKS or bcache signature.
    pub force: bool,
    /// Object (and slot) size of the store.
    pub object_size_bytes: u32,
    /// WAL size; 0 picks the automatic size (capacity / 8, 4..=256 MiB).
    pub wal_bytes: u64,
}

impl Default for PrepareOptions {
    fn default() -> Self {
        PrepareOptions {
            force: false,
            object_size_bytes: DEFAULT_OBJECT_BYTES,
            wal_bytes: 0,
        }
    }
}

/// A store found on (or just made on) a block device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceStore {
    /// The device path.
    pub device: PathBuf,
    /// The device's size.
    pub size_bytes: u64,
    /// The store's id (in its superblock and every WAL record).
    pub store_id: u64,
    /// The store's object size.
    pub object_size_bytes: u32,
    /// The store's WAL size.
    pub wal_bytes: u64,
    /// The store's capacity (the device, rounded down to 4 KiB).
    pub capacity_bytes: u64,
    /// How many objects the store holds at most.
    pub slot_count: u32,
}

impl DeviceStore {
    fn new(device: &Path, size_bytes: u64, layout: &StoreLayout) -> DeviceStore {
        DeviceStore {
            device: device.to_owned(),
            size_bytes,
            store_id: layout.store_id,
            object_size_bytes: layout.object_size_bytes,
            wal_bytes: layout.wal_bytes,
            capacity_bytes: layout.capacity_bytes,
            slot_count: layout.slot_count,
        }
    }
}

/// Make a store on the block device at `path`, after checking that it holds nothing (see
/// the module documentation); on any refusal nothing has been written.
pub fn prepare(path: &Path, opts: &PrepareOptions) -> Result<DeviceStore, StoreError> {
    check_not_in_use(path)?;
    let device = BlockDevice::open(path)?;
    if device.size_bytes() < MIN_DEVICE_BYTES {
        return Err(DeviceError::TooSmall {
            device: path.to_owned(),
            size_bytes: device.size_bytes(),
            min_bytes: MIN_DEVICE_BYTES,
        }
        .into());
    }
    let head = device.read_head(PROBE_BYTES)?;
    check_no_store(path, &head)?;
    if !opts.force {
        if let Some(found) = find_signature(&head, page_bytes()) {
            return Err(found.refusal(path).into());
        }
    }
    let store_opts = StoreOptions {
        capacity_bytes: 0,
        object_size_bytes: opts.object_size_bytes,
        wal_bytes: opts.wal_bytes,
    };
    let size_bytes = device.size_bytes();
    let store = crate::recovery::create_device(device, &store_opts, &IoOptions::default())?;
    let made = DeviceStore::new(path, size_bytes, &store.layout());
    store.close()?;
    Ok(made)
}

/// The store on the block device at `path`, if its first block is a valid superblock
/// (None: no Basalt magic). Opens the device read-only and shared: it may be in use.
pub fn inspect(path: &Path) -> Result<Option<DeviceStore>, StoreError> {
    let device = BlockDevice::open_read_only(path)?;
    let head = device.read_head(SUPERBLOCK_BYTES as usize)?;
    if !has_magic(&head) {
        return Ok(None);
    }
    let layout = StoreLayout::decode(&head)?;
    Ok(Some(DeviceStore::new(path, device.size_bytes(), &layout)))
}

/// Every block device under `/sys/class/block` whose first block holds a valid Basalt
/// superblock, in name order. Devices that cannot be opened or read are left out.
pub fn list() -> Vec<DeviceStore> {
    let Ok(entries) = std::fs::read_dir("/sys/class/block") else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
        .iter()
        .filter_map(|name| inspect(&Path::new("/dev").join(name)).ok().flatten())
        .collect()
}

/// Refuse a device that is mounted (it or one of its partitions) or held by another block
/// device (device-mapper, LVM, md, bcache). `O_EXCL` catches these too; these checks say
/// which it is.
fn check_not_in_use(path: &Path) -> Result<(), DeviceError> {
    let meta = std::fs::metadata(path).map_err(|source| DeviceError::Open {
        device: path.to_owned(),
        source,
    })?;
    if !std::os::unix::fs::FileTypeExt::is_block_device(&meta.file_type()) {
        return Err(DeviceError::NotBlockDevice {
            device: path.to_owned(),
        });
    }
    let rdev = meta.rdev();
    let sys = PathBuf::from(format!(
        "/sys/dev/block/{}:{}",
        libc::major(rdev),
        libc::minor(rdev)
    ));
    let mut devs = vec![format!("{}:{}", libc::major(rdev), libc::minor(rdev))];
    devs.extend(partitions(&sys));
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if let Some((mounted, mount_point)) = find_mount(&mountinfo, &devs, &canonical) {
        return Err(DeviceError::Mounted {
            device: path.to_owned(),
            mounted,
            mount_point,
        });
    }
    let holders: Vec<String> = std::fs::read_dir(sys.join("holders"))
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if !holders.is_empty() {
        return Err(DeviceError::Held {
            device: path.to_owned(),
            holders: holders.join(", "),
        });
    }
    Ok(())
}

/// The "major:minor" of each partition of the device whose sysfs directory is `sys`.
fn partitions(sys: &Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(sys) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("partition").is_file())
        .filter_map(|p| std::fs::read_to_string(p.join("dev")).ok())
        .map(|dev| dev.trim().to_owned())
        .collect()
}

/// The first mount in `mountinfo` of one of `devs` ("major:minor") or of the device node
/// `canonical`: (what is mounted, where).
fn find_mount(mountinfo: &str, devs: &[String], canonical: &Path) -> Option<(String, String)> {
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(dev), Some(point), Some(source)) =
            (fields.get(2), fields.get(4), fields.get(sep + 2))
        else {
            continue;
        };
        let same_node =
            source.starts_with('/') && std::fs::canonicalize(source).is_ok_and(|s| s == canonical);
        if devs.iter().any(|d| d == dev) || same_node {
            return Some((source.to_string(), point.to_string()));
        }
    }
    None
}

/// Refuse a device holding a Basalt superblock, valid or damaged: `--force` does not
/// override this (a store's data would be lost, maybe the cluster's last copy).
fn check_no_store(path: &Path, head: &[u8]) -> Result<(), DeviceError> {
    if !has_magic(head) {
        return Ok(());
    }
    match StoreLayout::decode(&head[..SUPERBLOCK_BYTES as usize]) {
        Ok(layout) => Err(DeviceError::HasStore {
            device: path.to_owned(),
            store_id: layout.store_id,
        }),
        Err(e) => Err(DeviceError::DamagedStore {
            device: path.to_owned(),
            reason: e.to_string(),
        }),
    }
}

/// Something found on a device that `--force` may overwrite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// A partition table ("an MBR partition table", "a GPT partition table").
    PartitionTable(&'static str),
    /// A filesystem or volume signature ("an ext2/3/4 filesystem", "a swap area"...).
    Signature(&'static str),
}

impl Found {
    fn refusal(self, path: &Path) -> DeviceError {
        match self {
            Found::PartitionTable(what) => DeviceError::PartitionTable {
                device: path.to_owned(),
                what,
            },
            Found::Signature(what) => DeviceError::Signature {
                device: path.to_owned(),
                what,
            },
        }
    }
}

/// bcache's superblock magic, at 4096 + 24.
const BCACHE_MAGIC: [u8; 16] = [
    0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81,
];

/// The first partition table or signature in `head` (a device's first bytes; the swap
/// signature sits 10 bytes before the end of its first page of `page_bytes`).
pub fn find_signature(head: &[u8], page_bytes: usize) -> Option<Found> {
    let at = |offset: usize, magic: &[u8]| head.get(offset..offset + magic.len()) == Some(magic);
    if at(512, b"EFI PART") || at(4096, b"EFI PART") {
        return Some(Found::PartitionTable("a GPT partition table"));
    }
    let signatures: [(bool, &'static str); 7] = [
        (at(1080, &[0x53, 0xef]), "an ext2/3/4 filesystem"),
        (at(0, b"XFSB"), "an XFS filesystem"),
        (at(65600, b"_BHRfS_M"), "a btrfs filesystem"),
        (
            [4086, page_bytes.saturating_sub(10)]
                .iter()
                .any(|&o| at(o, b"SWAPSPACE2") || at(o, b"SWAP-SPACE")),
            "a swap area",
        ),
        (
            [0, 512, 1024, 1536].iter().any(|&o| at(o, b"LABELONE")),
            "an LVM2 physical volume",
        ),
        (at(0, b"LUKS\xba\xbe"), "a LUKS encrypted volume"),
        (at(4096 + 24, &BCACHE_MAGIC), "a bcache device"),
    ];
    if let Some((_, what)) = signatures.iter().find(|(found, _)| *found) {
        return Some(Found::Signature(what));
    }
    // Last: FAT and NTFS boot sectors carry 0x55AA too; a filesystem named above is the
    // better reason.
    if at(510, &[0x55, 0xaa]) {
        return Some(Found::PartitionTable(
            "an MBR partition table (or a boot sector)",
        ));
    }
    None
}

/// The system's page size (where swap puts its signature).
fn page_bytes() -> usize {
    // SAFETY: sysconf reads a constant; no memory is involved.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: each known signature is recognised at its offset, and zeros are clean.
    #[test]
    fn signatures_are_found_at_their_offsets() {
        let with = |offset: usize, magic: &[u8]| {
            let mut head = vec![0u8; PROBE_BYTES];
            head[offset..offset + magic.len()].copy_from_slice(magic);
            find_signature(&head, 4096)
        };
        assert_eq!(find_signature(&vec![0u8; PROBE_BYTES], 4096), None);
        assert_eq!(
            with(1080, &[0x53, 0xef]),
            Some(Found::Signature("an ext2/3/4 filesystem"))
        );
        assert_eq!(
            with(510, &[0x55, 0xaa]),
            Some(Found::PartitionTable(
                "an MBR partition table (or a boot sector)"
            ))
        );
        assert_eq!(
            with(4096, b"EFI PART"),
            Some(Found::PartitionTable("a GPT partition table"))
        );
        assert_eq!(
            with(65600, b"_BHRfS_M"),
            Some(Found::Signature("a btrfs filesystem"))
        );
        assert_eq!(
            with(4086, b"SWAPSPACE2"),
            Some(Found::Signature("a swap area"))
        );
        assert_eq!(
            with(512, b"LABELONE"),
            Some(Found::Signature("an LVM2 physical volume"))
        );
        assert_eq!(
            with(0, b"LUKS\xba\xbe"),
            Some(Found::Signature("a LUKS encrypted volume"))
        );
        assert_eq!(
            with(4120, &BCACHE_MAGIC),
            Some(Found::Signature("a bcache device"))
        );
        assert_eq!(
            with(0, b"XFSB"),
            Some(Found::Signature("an XFS filesystem"))
        );
    }

    /// Goal: a mount of the device or of one of its partitions is found by device number.
    #[test]
    fn mounts_are_found_by_device_number() {
        let info = "22 27 0:21 / /proc rw - proc proc rw\n\
                    40 27 7:3 / /mnt/x rw,relatime - ext4 /dev/loop3 rw\n";
        let none = Path::new("/nonexistent");
        assert_eq!(
            find_mount(info, &["7:3".into()], none),
            Some(("/dev/loop3".into(), "/mnt/x".into()))
        );
        assert_eq!(find_mount(info, &["7:4".into()], none), None);
    }
}
