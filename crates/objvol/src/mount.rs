//! An objvol mounted by this host's kernel where there is no NBD driver (as here): nbdfuse
//! serves the NBD export as a file, a read-only loop device with direct I/O turns the file
//! into a block device (no page-cache readahead into other files' blocks), and the kernel's
//! EROFS mounts it read-only. The README's recipe, for the bench and the tests; undone on
//! drop, in reverse order, so a failed run leaves no mount, loop device or FUSE file behind.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for any one step (nbdfuse serving, losetup, mount).
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a mount could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// This host cannot mount at all (not root, no FUSE, no nbdfuse).
    #[error("cannot mount here: {0}")]
    Unavailable(String),
    /// A step failed; `detail` is what the tool said.
    #[error("{step}: {detail}")]
    Step { step: &'static str, detail: String },
}

/// Why this host cannot mount an export, or `None` if it can: root, `/dev/fuse`, `nbdfuse`,
/// `losetup` and `mount` are needed.
pub fn unavailable_reason() -> Option<String> {
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    });
    if !root {
        return Some("mounting needs root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    ["nbdfuse", "losetup", "mount", "fusermount3"]
        .into_iter()
        .find(|tool| !on_path(tool))
        .map(|tool| format!("`{tool}` is not installed"))
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
}

/// An export mounted read-only at [`KernelMount::path`].
#[derive(Debug)]
pub struct KernelMount {
    fuse_dir: PathBuf,
    nbdfuse: Child,
    loop_dev: Option<String>,
    mnt: PathBuf,
    mounted: bool,
    undone: bool,
}

impl KernelMount {
    /// Mounts the export at `uri` (`nbd://HOST:PORT/objvol:NAME`), using `dir` for the FUSE
    /// file (`dir/fuse`) and the mount point (`dir/mnt`).
    pub fn new(uri: &str, dir: &Path) -> Result<Self, MountError> {
        if let Some(reason) = unavailable_reason() {
            return Err(MountError::Unavailable(reason));
        }
        let fuse_dir = dir.join("fuse");
        let mnt = dir.join("mnt");
        for d in [&fuse_dir, &mnt] {
            std::fs::create_dir_all(d).map_err(|e| MountError::Step {
                step: "create the mount directories",
                detail: format!("{}: {e}", d.display()),
            })?;
        }
        let nbdfuse = Command::new("nbdfuse")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .arg("-r")
            .arg(&fuse_dir)
            .arg(uri)
            .spawn()
            .map_err(|e| MountError::Step {
                step: "start nbdfuse",
                detail: e.to_string(),
            })?;
        let mut m = KernelMount {
            fuse_dir,
            nbdfuse,
            loop_dev: None,
            mnt,
            mounted: false,
            undone: false,
        };
        let file = m.fuse_dir.join("nbd");
        let deadline = Instant::now() + STEP_TIMEOUT;
        // Bound: the deadline, or nbdfuse exiting (it could not reach the export).
        while !file.exists() {
            if let Ok(Some(status)) = m.nbdfuse.try_wait() {
                return Err(MountError::Step {
                    step: "nbdfuse",
                    detail: format!("exited ({status}) before serving {uri}"),
                });
            }
            if Instant::now() > deadline {
                return Err(MountError::Step {
                    step: "nbdfuse",
                    detail: format!("did not serve {uri} within {STEP_TIMEOUT:?}"),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = run(
            "losetup",
            Command::new("losetup")
                .args(["-r", "--direct-io=on", "-f", "--show"])
                .arg(&file),
        )?;
        m.loop_dev = Some(String::from_utf8_lossy(&out.stdout).trim().to_string());
        let dev = m.loop_dev.clone().unwrap_or_default();
        run(
            "mount -t erofs",
            Command::new("mount")
                .args(["-t", "erofs", "-o", "ro", &dev])
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
        self.loop_dev.as_deref().unwrap_or_default()
    }

    /// Unmounts now (as drop does).
    pub fn unmount(mut self) {
        self.undo();
    }

    fn undo(&mut self) {
        if std::mem::replace(&mut self.undone, true) {
            return;
        }
        let quiet = |c: &mut Command| {
            let _ = run("cleanup", c);
        };
        if self.mounted {
            // A file still open under the mount makes it busy: 20 tries of 100 ms, then a
            // lazy unmount (gone once the last file closes), never a mount left behind.
            let unmounted = (0..20).any(|_| {
                let ok = run("umount", Command::new("umount").arg(&self.mnt)).is_ok();
                if !ok {
                    std::thread::sleep(Duration::from_millis(100));
                }
                ok
            });
            if !unmounted {
                quiet(Command::new("umount").arg("-l").arg(&self.mnt));
            }
        }
        if let Some(dev) = &self.loop_dev {
            quiet(Command::new("losetup").args(["-d", dev]));
        }
        // The loop device lets go of the file a moment after `losetup -d`; until then the
        // FUSE mount is busy. Bound: 50 tries of 100 ms, then a lazy unmount, so a killed
        // nbdfuse never leaves a dead mount behind (a later mount here would fail).
        let unmounted = (0..50).any(|_| {
            let ok = run(
                "fusermount3 -u",
                Command::new("fusermount3").arg("-u").arg(&self.fuse_dir),
            )
            .is_ok();
            if !ok {
                std::thread::sleep(Duration::from_millis(100));
            }
            ok
        });
        if !unmounted {
            quiet(Command::new("fusermount3").arg("-uz").arg(&self.fuse_dir));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        // Bound: the deadline; nbdfuse exits once its mount is gone.
        while matches!(self.nbdfuse.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.nbdfuse.kill();
        let _ = self.nbdfuse.wait();
    }
}

impl Drop for KernelMount {
    fn drop(&mut self) {
        self.undo();
    }
}

/// Runs a tool to completion within [`STEP_TIMEOUT`]; a failure carries its stderr.
fn run(step: &'static str, command: &mut Command) -> Result<Output, MountError> {
    let fail = |detail: String| MountError::Step { step, detail };
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(e.to_string()))?;
    let deadline = Instant::now() + STEP_TIMEOUT;
    // Bound: the deadline. The tools print little, so the pipes cannot fill and stall them.
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(format!("took over {STEP_TIMEOUT:?}")));
            }
            Err(e) => return Err(fail(e.to_string())),
        }
    }
    let out = child.wait_with_output().map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        return Err(fail(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out)
}
