//! Goal: stores on real block devices (loop devices with direct I/O): `prepare` makes one
//! that opens, takes writes and reads them back after a reopen; every refusal names the
//! device and the reason and leaves the device's bytes as they were; a file store is fully
//! allocated, and a filesystem too small for it is refused naming the shortfall.
//!
//! Needs root and `losetup` (util-linux), `mkfs.ext4` (e2fsprogs) and `mount`: a missing
//! one fails the test, it is not skipped.

use basalt_proto::{ObjectId, Version};
use basalt_store::prepare::{self, PrepareOptions};
use basalt_store::{
    BlockDevice, DeviceError, IoOptions, Store, StoreError, StoreOptions, MIN_DEVICE_BYTES,
};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Size of the test devices: small, and sparse in their backing files.
const DEVICE_BYTES: u64 = 64 << 20;

#[path = "support/loop_device.rs"]
mod loop_device;

use loop_device::LoopDevice;

/// crc32c of the device's first MiB, read directly (not from a page cache).
fn head_crc(dev: &LoopDevice) -> u32 {
    let device = BlockDevice::open_read_only(&dev.path).expect("open read-only");
    crc32c::crc32c(&device.read_head(1 << 20).expect("read head"))
}

/// Run `prepare` on `dev`, expect it refused with exactly `message`, and check that the
/// device's first MiB did not change.
fn assert_refused(dev: &LoopDevice, opts: &PrepareOptions, message: &str) -> StoreError {
    let before = head_crc(dev);
    let err = prepare::prepare(&dev.path, opts).expect_err("prepare must refuse");
    assert_eq!(err.to_string(), message);
    assert_eq!(
        head_crc(dev),
        before,
        "a refused prepare wrote to the device"
    );
    err
}

/// The error of `result`, which must have failed (a `Store` has no Debug for expect_err).
/// Open the device again after a store on it was dropped. The kernel may release the
/// previous exclusive open a moment after the last descriptor is closed (seen under load in
/// the full suite), so "in use" is retried, for a bounded time.
fn reopen(path: &std::path::Path, io: &IoOptions) -> Store {
    const REOPEN_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(5);
    let start = std::time::Instant::now();
    loop {
        match Store::open_device(path, io) {
            Ok(store) => return store,
            Err(StoreError::Device(DeviceError::InUse { .. }))
                if start.elapsed() < REOPEN_WAIT_MAX =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("reopen {}: {e}", path.display()),
        }
    }
}

fn error_of(result: Result<Store, StoreError>) -> StoreError {
    match result {
        Ok(_) => panic!("expected an error, the store opened"),
        Err(e) => e,
    }
}

/// `open()`, again while the store's file lock is still held by the threads of a store just
/// closed (they drop the file a moment after `close` returns).
fn when_unlocked(open: impl Fn() -> Result<Store, StoreError>) -> Result<Store, StoreError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match open() {
            Err(StoreError::Io { op, .. })
                if op.starts_with("lock") && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            result => return result,
        }
    }
}

fn obj(n: u64) -> ObjectId {
    ObjectId::new(9, n)
}

fn ver(counter: u64) -> Version {
    Version { epoch: 1, counter }
}

#[test]
fn a_prepared_device_holds_writes_across_a_reopen() {
    let dev = LoopDevice::new(DEVICE_BYTES, &[]);
    let made = prepare::prepare(&dev.path, &PrepareOptions::default()).expect("prepare");
    assert_eq!(made.device, dev.path);
    assert_eq!(made.size_bytes, DEVICE_BYTES);
    assert_eq!(made.capacity_bytes, DEVICE_BYTES);
    assert_eq!(made.object_size_bytes, 128 << 10);
    assert_eq!(made.wal_bytes, 8 << 20, "an eighth of the device");
    assert_eq!(
        prepare::inspect(&dev.path).expect("inspect"),
        Some(made.clone())
    );
    assert!(prepare::list().contains(&made), "disk ls finds it");

    let io = IoOptions {
        engine: basalt_store::engine::EngineKind::Threads { threads: 2 },
        direct: true,
    };
    let whole: Vec<u8> = (0..128 << 10).map(|i: u32| (i % 251) as u8).collect();
    let small = vec![0xa5u8; 4096];
    {
        let store = Store::open_device(&dev.path, &io).expect("open the prepared device");
        assert_eq!(store.layout().store_id, made.store_id);
        // The device's I/O runs through the engine, direct, and reads are awaited.
        assert_eq!(store.io_mode(), "direct threads");
        assert!(store.awaits_io());
        assert_eq!(store.stats().capacity_bytes, made.capacity_bytes);
        store.write(obj(1), 0, &whole, ver(1)).expect("whole write");
        store
            .write(obj(2), 8192, &small, ver(2))
            .expect("small write");
        store.flush().expect("flush");
        // Held exclusively while open: a second open is refused.
        let again = error_of(Store::open_device(&dev.path, &io));
        assert_eq!(
            again.to_string(),
            format!(
                "{} is mounted or in use by another process (O_EXCL refused)",
                dev.path.display()
            )
        );
        // Dropped without close: the reopen recovers from the WAL.
    }
    let uring = IoOptions {
        engine: basalt_store::engine::EngineKind::Uring,
        direct: true,
    };
    let store = reopen(&dev.path, &uring);
    assert_eq!(store.io_mode(), "direct uring");
    let mut buf = vec![0u8; 128 << 10];
    store.read(obj(1), 0, &mut buf).expect("read whole");
    assert_eq!(buf, whole);
    let mut awaited = vec![0u8; 128 << 10];
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(store.read_async(obj(1), 0, &mut awaited))
        .expect("awaited read");
    assert_eq!(awaited, whole);
    let mut buf = vec![0u8; 4096];
    store.read(obj(2), 8192, &mut buf).expect("read small");
    assert_eq!(buf, small);
    store.close().expect("close");
}

#[test]
fn a_device_with_an_ext4_filesystem_is_refused_unless_forced() {
    let dev = LoopDevice::new(DEVICE_BYTES, &[]);
    let status = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&dev.path)
        .status()
        .unwrap_or_else(|e| panic!("this test needs mkfs.ext4 (e2fsprogs): {e}"));
    assert!(status.success(), "mkfs.ext4 failed");
    {
        let mnt = tempfile::tempdir().expect("tempdir");
        let status = Command::new("mount")
            .arg(&dev.path)
            .arg(mnt.path())
            .status()
            .unwrap_or_else(|e| panic!("this test needs mount: {e}"));
        assert!(status.success(), "mount the ext4 filesystem");
        let _unmount = Unmount(mnt.path().to_owned());
        let forced = PrepareOptions {
            force: true,
            ..PrepareOptions::default()
        };
        let before = head_crc(&dev);
        let err = prepare::prepare(&dev.path, &forced).expect_err("mounted");
        assert_eq!(
            err.to_string(),
            format!(
                "{0} is mounted ({0} at {1})",
                dev.path.display(),
                mnt.path().display()
            )
        );
        assert_eq!(head_crc(&dev), before);
    }
    assert_refused(
        &dev,
        &PrepareOptions::default(),
        &format!(
            "{} holds an ext2/3/4 filesystem signature; its data would be lost (--force overrides)",
            dev.path.display()
        ),
    );
    let forced = PrepareOptions {
        force: true,
        ..PrepareOptions::default()
    };
    prepare::prepare(&dev.path, &forced).expect("--force overrides a filesystem");
    Store::open_device(&dev.path, &IoOptions::default())
        .expect("open")
        .close()
        .expect("close");
}

#[test]
fn a_device_with_an_mbr_is_refused() {
    let dev = LoopDevice::new(
        DEVICE_BYTES,
        &[(446, &[0x80, 0, 2, 0]), (510, &[0x55, 0xaa])],
    );
    assert_refused(
        &dev,
        &PrepareOptions::default(),
        &format!(
            "{} holds an MBR partition table (or a boot sector); its partitions' data would be \
             lost (--force overrides)",
            dev.path.display()
        ),
    );
}

#[test]
fn a_device_held_open_exclusively_is_refused() {
    let dev = LoopDevice::new(DEVICE_BYTES, &[]);
    let held = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(&dev.path)
        .expect("hold the device");
    let err = assert_refused(
        &dev,
        &PrepareOptions {
            force: true,
            ..PrepareOptions::default()
        },
        &format!(
            "{} is mounted or in use by another process (O_EXCL refused)",
            dev.path.display()
        ),
    );
    assert!(matches!(err, StoreError::Device(DeviceError::InUse { .. })));
    drop(held);
}

#[test]
fn a_device_holding_a_store_is_refused_even_when_forced() {
    let dev = LoopDevice::new(DEVICE_BYTES, &[]);
    let made = prepare::prepare(&dev.path, &PrepareOptions::default()).expect("prepare");
    for force in [false, true] {
        assert_refused(
            &dev,
            &PrepareOptions {
                force,
                ..PrepareOptions::default()
            },
            &format!(
                "{} already holds a Basalt store (id {:016x}); Basalt will not overwrite a store \
                 (zero its first 4 KiB yourself once its OSD is removed)",
                dev.path.display(),
                made.store_id
            ),
        );
    }
}

#[test]
fn a_too_small_device_is_refused() {
    let dev = LoopDevice::new(MIN_DEVICE_BYTES / 2, &[]);
    assert_refused(
        &dev,
        &PrepareOptions::default(),
        &format!(
            "{} holds 16.0 MiB, a store needs at least 32.0 MiB",
            dev.path.display()
        ),
    );
}

#[test]
fn an_unprepared_device_or_a_file_is_not_opened_as_a_store() {
    let dev = LoopDevice::new(DEVICE_BYTES, &[]);
    let before = head_crc(&dev);
    let err = error_of(Store::open_device(&dev.path, &IoOptions::default()));
    assert_eq!(
        err.to_string(),
        format!(
            "{0} holds no Basalt store; run `basalt disk prepare {0}` first",
            dev.path.display()
        )
    );
    assert_eq!(head_crc(&dev), before);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("plain");
    std::fs::write(&file, vec![0u8; 4096]).expect("write");
    let err = prepare::prepare(&file, &PrepareOptions::default()).expect_err("a file");
    assert_eq!(
        err.to_string(),
        format!("{} is not a block device", file.display())
    );
}

/// Unmounts its directory on drop.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A tmpfs of `size` mounted on a temporary directory, unmounted on drop.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn new(size: &str) -> SmallFs {
        let dir = tempfile::tempdir().expect("tempdir");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap_or_else(|e| panic!("this test needs mount and root: {e}"));
        assert!(status.success(), "mounting a tmpfs failed (needs root)");
        SmallFs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn a_file_store_is_fully_allocated_or_refused_naming_the_shortfall() {
    let fs = SmallFs::new("48m");
    let opts = StoreOptions {
        capacity_bytes: 32 << 20,
        ..StoreOptions::default()
    };
    let path = fs.path().join("store.dat");
    let store = Store::create_with(&path, &opts, &IoOptions::default()).expect("create");
    let allocated = std::fs::metadata(&path).expect("stat").blocks() * 512;
    assert!(
        allocated >= 32 << 20,
        "only {allocated} bytes allocated of 32 MiB"
    );
    store.close().expect("close");

    let big = fs.path().join("big.dat");
    let opts = StoreOptions {
        capacity_bytes: 64 << 20,
        ..StoreOptions::default()
    };
    let err = error_of(Store::create_with(&big, &opts, &IoOptions::default()));
    assert_eq!(
        err.to_string(),
        format!(
            "the store needs 64.0 MiB, the filesystem of {} has 16.0 MiB free",
            fs.path().display()
        )
    );
    assert!(!big.exists(), "the half-made file is removed");
    // Sparse stores (basalt up) still fit: only their metadata is allocated.
    let sparse = Store::create_sparse(&big, &opts, &IoOptions::default()).expect("sparse");
    sparse.close().expect("close");
    // A sparse store opened by Store::open is allocated now: no room, refused, kept.
    let err = error_of(when_unlocked(|| Store::open(&big)));
    assert!(
        err.to_string().starts_with(&format!(
            "the store needs 64.0 MiB, the filesystem of {} has ",
            fs.path().display()
        )),
        "{err}"
    );
    assert!(big.exists(), "an existing store is never removed");
    when_unlocked(|| Store::open_sparse(&big, &IoOptions::default()))
        .expect("open sparse")
        .close()
        .expect("close");
    // A sparse store's WAL is allocated all the same: one that cannot be is refused, and the
    // error says what was asked for.
    let walled = fs.path().join("walled.dat");
    let opts = StoreOptions {
        capacity_bytes: 1 << 30,
        wal_bytes: 64 << 20,
        ..StoreOptions::default()
    };
    let err = error_of(Store::create_sparse(&walled, &opts, &IoOptions::default()));
    assert!(
        err.to_string().starts_with(
            "the store's WAL and metadata (its data region stays sparse) needs 66.6 MiB, "
        ),
        "{err}"
    );
    assert!(!walled.exists(), "the half-made file is removed");
}
