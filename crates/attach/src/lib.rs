//! An NBD export attached to this host as a kernel block device where there is no kernel
//! NBD client (as on these test machines): nbdfuse serves the export as a file, and a loop
//! device with direct I/O turns the file into a block device (no page cache in between).
//! Used by the object-backed volume mounts and the CSI node plugin. An [`Attachment`] is
//! plain data (its FUSE directory, loop device and nbdfuse's pid), so a process that
//! restarts can still detach what an earlier run attached.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The nbdfuse processes this process started, reaped when detached (one started by an
/// earlier run of this process is reaped by init).
static NBDFUSE: Mutex<Vec<Child>> = Mutex::new(Vec::new());

/// Longest wait for any one step (nbdfuse serving, losetup, mount, mkfs).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// Why an attachment or a mount could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// This host cannot attach at all (not root, no FUSE, a tool missing).
    #[error("cannot attach here: {0}")]
    Unavailable(String),
    /// A step failed; `detail` is what the tool said.
    #[error("{step}: {detail}")]
    Step { step: &'static str, detail: String },
}

/// Why this host cannot attach an export, or `None` if it can: root, `/dev/fuse`,
/// `nbdfuse`, `losetup`, `mount` and `fusermount3` are needed.
pub fn unavailable_reason() -> Option<String> {
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    });
    if !root {
        return Some("attaching needs root".into());
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

/// An export attached as a block device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// nbdfuse's mount point; the export is the file `nbd` in it.
    pub fuse_dir: PathBuf,
    /// The loop device over that file (`/dev/loop3`).
    pub device: String,
    /// nbdfuse's process id.
    pub nbdfuse_pid: u32,
}

impl Attachment {
    /// Attach the export at `uri` (`nbd://HOST:PORT/NAME`, `nbd+unix:///NAME?socket=...`),
    /// with `fuse_dir` (created) as nbdfuse's mount point; read-only when `read_only`. A
    /// failed step undoes the ones before it.
    pub fn attach(uri: &str, fuse_dir: &Path, read_only: bool) -> Result<Self, AttachError> {
        if let Some(reason) = unavailable_reason() {
            return Err(AttachError::Unavailable(reason));
        }
        std::fs::create_dir_all(fuse_dir).map_err(|e| AttachError::Step {
            step: "create the FUSE directory",
            detail: format!("{}: {e}", fuse_dir.display()),
        })?;
        let mut nbdfuse = Command::new("nbdfuse");
        if read_only {
            nbdfuse.arg("-r");
        }
        let mut child = nbdfuse
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .arg(fuse_dir)
            .arg(uri)
            .spawn()
            .map_err(|e| AttachError::Step {
                step: "start nbdfuse",
                detail: e.to_string(),
            })?;
        // nbdfuse's messages (a refused export names why: a writer lock's holder), read
        // by a thread that ends with the process.
        let said = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let reader = child.stderr.take().map(|mut stderr| {
            let said = said.clone();
            std::thread::spawn(move || {
                use std::io::Read;
                let mut buf = [0u8; 4096];
                // Bound: ends at EOF, when nbdfuse exits.
                while let Ok(n @ 1..) = stderr.read(&mut buf) {
                    let mut s = said.lock().expect("nbdfuse output");
                    if s.len() < 16 << 10 {
                        s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                }
            })
        });
        let file = fuse_dir.join("nbd");
        let deadline = Instant::now() + STEP_TIMEOUT;
        // Bound: the deadline, or nbdfuse exiting (it could not reach the export).
        while !file.exists() {
            let failed = match child.try_wait() {
                Ok(Some(status)) => Some(format!("exited ({status}) before serving {uri}")),
                _ if Instant::now() > deadline => {
                    Some(format!("did not serve {uri} within {STEP_TIMEOUT:?}"))
                }
                _ => None,
            };
            if let Some(mut detail) = failed {
                let _ = child.kill();
                let _ = child.wait();
                if let Some(reader) = reader {
                    let _ = reader.join();
                }
                let said = said.lock().expect("nbdfuse output");
                if !said.trim().is_empty() {
                    detail = format!("{detail}: {}", said.trim());
                }
                let _ = run(
                    "fusermount3 -uz",
                    Command::new("fusermount3").arg("-uz").arg(fuse_dir),
                );
                return Err(AttachError::Step {
                    step: "nbdfuse",
                    detail,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut losetup = Command::new("losetup");
        if read_only {
            losetup.arg("-r");
        }
        let attached = run(
            "losetup",
            losetup.args(["--direct-io=on", "-f", "--show"]).arg(&file),
        );
        let partial = Attachment {
            fuse_dir: fuse_dir.to_path_buf(),
            device: String::new(),
            nbdfuse_pid: child.id(),
        };
        NBDFUSE.lock().expect("nbdfuse list lock").push(child);
        match attached {
            Ok(out) => Ok(Attachment {
                device: String::from_utf8_lossy(&out.stdout).trim().to_string(),
                ..partial
            }),
            Err(e) => {
                partial.detach();
                Err(e)
            }
        }
    }

    /// Detach: the loop device, then nbdfuse's mount (nbdfuse then exits). Never fails: a
    /// busy FUSE mount is unmounted lazily so that nothing stays behind.
    pub fn detach(&self) {
        if !self.device.is_empty() {
            let _ = run(
                "losetup -d",
                Command::new("losetup").args(["-d", &self.device]),
            );
        }
        // The loop device lets go of the file a moment after `losetup -d`; until then the
        // FUSE mount is busy. Bound: 50 tries of 100 ms, then a lazy unmount.
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
            let _ = run(
                "fusermount3 -uz",
                Command::new("fusermount3").arg("-uz").arg(&self.fuse_dir),
            );
        }
        // Bound: 10 s; nbdfuse exits once its mount is gone.
        let proc_dir = PathBuf::from(format!("/proc/{}", self.nbdfuse_pid));
        let deadline = Instant::now() + Duration::from_secs(10);
        while is_nbdfuse(&proc_dir) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if is_nbdfuse(&proc_dir) {
            let _ = run(
                "kill nbdfuse",
                Command::new("kill").arg(self.nbdfuse_pid.to_string()),
            );
        }
        let mut ours = NBDFUSE.lock().expect("nbdfuse list lock");
        if let Some(i) = ours.iter().position(|c| c.id() == self.nbdfuse_pid) {
            let mut child = ours.swap_remove(i);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Is `/proc/PID` (given) a live nbdfuse (not a zombie, not a reused pid)?
fn is_nbdfuse(proc_dir: &Path) -> bool {
    let comm = std::fs::read_to_string(proc_dir.join("comm")).unwrap_or_default();
    let state = std::fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
    let zombie = state
        .rfind(')')
        .and_then(|i| state[i + 1..].trim_start().chars().next())
        == Some('Z');
    comm.trim() == "nbdfuse" && !zombie
}

/// Is something mounted at `path` (a line of /proc/self/mountinfo names it)?
pub fn is_mount_point(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mount_point| mount_point == want)
}

/// Unmount `path`: a file still open under it makes it busy, so 20 tries of 100 ms, then a
/// lazy unmount (gone once the last file closes): never a mount left behind.
pub fn unmount(path: &Path) {
    let unmounted = (0..20).any(|_| {
        let ok = run("umount", Command::new("umount").arg(path)).is_ok();
        if !ok {
            std::thread::sleep(Duration::from_millis(100));
        }
        ok
    });
    if !unmounted {
        let _ = run("umount -l", Command::new("umount").arg("-l").arg(path));
    }
}

/// Runs a tool to completion within [`STEP_TIMEOUT`]; a failure carries its stderr.
pub fn run(step: &'static str, command: &mut Command) -> Result<Output, AttachError> {
    let fail = |detail: String| AttachError::Step { step, detail };
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
