//! A loop device for tests of raw-device stores, shared by the store, OSD and CLI tests
//! (included with `#[path]`, so it needs nothing but std and tempfile).
//!
//! Needs root and `losetup` (util-linux): without them the test fails, it is not skipped.

use std::path::PathBuf;
use std::process::Command;

/// A loop device with direct I/O over a sparse file, zeros except what `new` was given;
/// detached on drop (also when the test fails).
pub struct LoopDevice {
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl LoopDevice {
    /// A new loop device of `size_bytes`, zeros except `init` written at its offsets.
    pub fn new(size_bytes: u64, init: &[(u64, &[u8])]) -> LoopDevice {
        let dir = tempfile::tempdir().expect("tempdir");
        let backing = dir.path().join("backing.img");
        let file = std::fs::File::create(&backing).expect("create backing file");
        file.set_len(size_bytes).expect("size backing file");
        for (offset, bytes) in init {
            std::os::unix::fs::FileExt::write_all_at(&file, bytes, *offset).expect("init");
        }
        drop(file);
        let out = Command::new("losetup")
            .args(["--find", "--show", "--direct-io=on"])
            .arg(&backing)
            .output()
            .unwrap_or_else(|e| {
                panic!("this test needs losetup (util-linux) and root: running it failed: {e}")
            });
        assert!(
            out.status.success(),
            "losetup --find --show --direct-io=on failed (this test needs root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        wait_until_exclusive(&path);
        LoopDevice { path, _dir: dir }
    }

    /// The device's path as text (for command lines).
    #[allow(dead_code)]
    pub fn name(&self) -> String {
        self.path.display().to_string()
    }
}

/// Wait (at most 5 s) until `path` can be opened exclusively: a freshly attached loop
/// device was once seen refusing O_EXCL (EBUSY) for a moment in a test that opened it at
/// once, with nothing else of the test holding it (a kernel or udev probe of the new device
/// is the likely holder). The tests' own opens come after this.
fn wait_until_exclusive(path: &std::path::Path) {
    use std::os::unix::fs::OpenOptionsExt;
    const O_EXCL: i32 = 0o200;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    // Bound: 5 s of 20 ms pauses.
    loop {
        let open = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(O_EXCL)
            .open(path);
        match open {
            Ok(_) => return,
            Err(e) if std::time::Instant::now() >= deadline => {
                panic!(
                    "{} stays busy after losetup attached it: {e}",
                    path.display()
                )
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let status = Command::new("losetup").arg("-d").arg(&self.path).status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!("could not detach {}: {status:?}", self.path.display());
        }
    }
}
