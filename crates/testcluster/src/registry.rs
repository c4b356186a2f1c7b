//! The on-disk record of what each [`Net`](crate::Net) created, so that the leftovers of a test
//! process that died without running `Drop` (SIGKILL, abort, a timeout) are found and removed
//! by a later run.
//!
//! `/run/basalt-testcluster/` (or `$TMPDIR/basalt-testcluster-UID/` when `/run` is not
//! writable) holds `lock`, flocked while a Net picks its index or stale state is swept, and one
//! `net-INDEX.state` per Net: a first line `owner PID START_TIME` (the start time guards
//! against pid reuse), then one line per resource, written *before* the resource is created.

use crate::netns;
use anyhow::{bail, Context, Result};
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The state directory when the harness may write to `/run`.
const RUN_DIR: &str = "/run/basalt-testcluster";
/// Longest wait for the cross-process lock (held only while indexes are allocated).
const LOCK_WAIT: Duration = Duration::from_secs(30);
/// Highest Net index; index I owns 10.77.I.0/24 (or 127.77.I.0/24 in loopback mode).
pub(crate) const MAX_INDEX: u8 = 250;

/// One thing a Net created and must remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resource {
    /// A network namespace (`ip netns`), with every process still inside it.
    Netns(String),
    /// A link in the root namespace (bridge or the root end of a veth pair).
    Link(String),
    /// An nftables `inet` table in the root namespace (loopback-mode partitions).
    NftTable(String),
    /// A process (and its process group), identified by pid and start time.
    Proc { pid: u32, start: u64 },
    /// A directory tree (the Net's temporary directory).
    Dir(PathBuf),
}

impl Resource {
    fn to_line(&self) -> String {
        match self {
            Resource::Netns(n) => format!("netns {n}"),
            Resource::Link(n) => format!("link {n}"),
            Resource::NftTable(n) => format!("nft {n}"),
            Resource::Proc { pid, start } => format!("proc {pid} {start}"),
            Resource::Dir(p) => format!("dir {}", p.display()),
        }
    }

    fn parse(line: &str) -> Option<Resource> {
        let (kind, rest) = line.split_once(' ')?;
        Some(match kind {
            "netns" => Resource::Netns(rest.to_string()),
            "link" => Resource::Link(rest.to_string()),
            "nft" => Resource::NftTable(rest.to_string()),
            "proc" => {
                let (pid, start) = rest.split_once(' ')?;
                Resource::Proc {
                    pid: pid.parse().ok()?,
                    start: start.parse().ok()?,
                }
            }
            "dir" => Resource::Dir(PathBuf::from(rest)),
            _ => return None,
        })
    }
}

/// The state file of one live Net: its index and the resources it recorded.
pub(crate) struct Registry {
    index: u8,
    path: PathBuf,
    inner: Mutex<RegistryInner>,
}

struct RegistryInner {
    /// `None` once the Net is dropped: nothing more may be created.
    file: Option<File>,
    resources: Vec<Resource>,
}

impl Registry {
    /// The Net's index, which names its links and picks its subnet.
    pub(crate) fn index(&self) -> u8 {
        self.index
    }

    /// Appends `r` to the state file; call before creating the resource.
    pub(crate) fn record(&self, r: Resource) -> Result<()> {
        let mut inner = lock(&self.inner);
        if inner.resources.contains(&r) {
            return Ok(());
        }
        let Some(file) = inner.file.as_mut() else {
            bail!("the Net was dropped: cannot create {r:?}");
        };
        // One write per line on an O_APPEND file: a reader never sees half a line.
        file.write_all(format!("{}\n", r.to_line()).as_bytes())
            .with_context(|| format!("append to {}", self.path.display()))?;
        inner.resources.push(r);
        Ok(())
    }

    /// Whether the Net is still alive (resources may be created).
    pub(crate) fn is_open(&self) -> bool {
        lock(&self.inner).file.is_some()
    }

    /// Closes the registry and removes every recorded resource except those `keep` selects;
    /// deletes the state file unless something could not be removed (a later
    /// [`cleanup_stale`] retries then).
    pub(crate) fn close(&self, keep: impl Fn(&Resource) -> bool) {
        let resources = {
            let mut inner = lock(&self.inner);
            inner.file = None;
            std::mem::take(&mut inner.resources)
        };
        let doomed: Vec<Resource> = resources.into_iter().filter(|r| !keep(r)).collect();
        let failures = remove_resources(&doomed);
        if failures.is_empty() {
            let _ = std::fs::remove_file(&self.path);
        } else {
            eprintln!(
                "basalt-testcluster: could not remove everything of net {} (kept {} for a later cleanup): {}",
                self.index,
                self.path.display(),
                failures.join("; ")
            );
        }
    }
}

/// Locks a mutex, ignoring poisoning: cleanup must also work while a test panics.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The cross-process lock on the state directory, released on drop (the fd closes).
struct DirLock {
    _file: File,
}

impl DirLock {
    fn acquire(dir: &Path) -> Result<DirLock> {
        let path = dir.join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("open {}", path.display()))?;
        let deadline = Instant::now() + LOCK_WAIT;
        // Loop bound: LOCK_WAIT of attempts.
        loop {
            // SAFETY: flock(2) on an fd we own.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(DirLock { _file: file });
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(err).with_context(|| format!("flock {}", path.display()));
            }
            if Instant::now() >= deadline {
                bail!("{} stayed locked for {LOCK_WAIT:?}", path.display());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The state directory, created if needed.
fn state_dir() -> Result<PathBuf> {
    if std::fs::create_dir_all(RUN_DIR).is_ok() && writable(Path::new(RUN_DIR)) {
        return Ok(PathBuf::from(RUN_DIR));
    }
    // SAFETY: getuid(2) cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("basalt-testcluster-{uid}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    Ok(dir)
}

fn writable(dir: &Path) -> bool {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap_or_default();
    // SAFETY: access(2) on a NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Start time of a process (field 22 of /proc/PID/stat, clock ticks since boot), or `None` if
/// it does not exist.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn state_path(dir: &Path, index: u8) -> PathBuf {
    dir.join(format!("net-{index}.state"))
}

/// Sweeps stale state, then claims the lowest free index for a new Net (under the lock).
/// `taken` says whether the machine already uses an index's subnet.
pub(crate) fn allocate(taken: impl Fn(u8) -> bool) -> Result<Registry> {
    let dir = state_dir()?;
    let _lock = DirLock::acquire(&dir)?;
    sweep(&dir)?;
    let index = (1..=MAX_INDEX)
        .find(|&i| !state_path(&dir, i).exists() && !taken(i))
        .with_context(|| format!("all {MAX_INDEX} testcluster subnets are in use"))?;
    let path = state_path(&dir, index);
    let mut file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("create {}", path.display()))?;
    let pid = std::process::id();
    let start = start_time(pid).context("read own start time")?;
    file.write_all(format!("owner {pid} {start}\n").as_bytes())
        .with_context(|| format!("write {}", path.display()))?;
    Ok(Registry {
        index,
        path,
        inner: Mutex::new(RegistryInner {
            file: Some(file),
            resources: Vec::new(),
        }),
    })
}

/// Removes the leftovers of earlier runs whose owning process is dead: their processes,
/// namespaces, links, nftables tables and temporary directories, plus any harness-named
/// link, namespace or table that no state file claims. Returns how many dead Nets it cleaned.
/// [`Net::new`](crate::Net::new) calls it; it never touches a live process's Net.
pub fn cleanup_stale() -> Result<usize> {
    let dir = state_dir()?;
    let _lock = DirLock::acquire(&dir)?;
    sweep(&dir)
}

/// [`cleanup_stale`] with the lock held.
fn sweep(dir: &Path) -> Result<usize> {
    let mut claimed = HashSet::new();
    let mut cleaned = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("list {}", dir.display()))? {
        let path = entry?.path();
        let Some(index) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("net-")?.strip_suffix(".state"))
            .and_then(|i| i.parse::<u8>().ok())
        else {
            continue;
        };
        claimed.insert(index);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let mut lines = text.lines();
        let owner_alive = lines
            .next()
            .and_then(|l| l.strip_prefix("owner "))
            .and_then(|l| l.split_once(' '))
            .and_then(|(pid, start)| Some((pid.parse().ok()?, start.parse::<u64>().ok()?)))
            .is_some_and(|(pid, start)| start_time(pid) == Some(start));
        if owner_alive {
            continue;
        }
        let resources: Vec<Resource> = lines.filter_map(Resource::parse).collect();
        let failures = remove_resources(&resources);
        if failures.is_empty() {
            std::fs::remove_file(&path).with_context(|| format!("remove {}", path.display()))?;
            cleaned += 1;
        } else {
            eprintln!(
                "basalt-testcluster: stale net {index} only partly removed: {}",
                failures.join("; ")
            );
        }
    }
    // Harness-named objects no state file claims (their state file is gone) are orphans.
    let orphans: Vec<Resource> = netns::list_netns()
        .into_iter()
        .filter(|n| netns::netns_index(n).is_some_and(|i| !claimed.contains(&i)))
        .map(Resource::Netns)
        .chain(
            netns::list_links()
                .into_iter()
                .filter(|n| netns::link_index(n).is_some_and(|i| !claimed.contains(&i)))
                .map(Resource::Link),
        )
        .chain(
            crate::firewall::list_root_tables()
                .into_iter()
                .filter(|n| crate::firewall::table_index(n).is_some_and(|i| !claimed.contains(&i)))
                .map(Resource::NftTable),
        )
        .collect();
    let failures = remove_resources(&orphans);
    if !failures.is_empty() {
        eprintln!(
            "basalt-testcluster: orphans only partly removed: {}",
            failures.join("; ")
        );
    }
    Ok(cleaned)
}

/// Removes resources in dependency order (processes hold namespaces, namespaces hold veth
/// ends), best effort; returns what failed.
pub(crate) fn remove_resources(resources: &[Resource]) -> Vec<String> {
    fn phase(r: &Resource) -> u8 {
        match r {
            Resource::Proc { .. } => 0,
            Resource::NftTable(_) => 1,
            Resource::Netns(_) => 2,
            Resource::Link(_) => 3,
            Resource::Dir(_) => 4,
        }
    }
    let mut ordered: Vec<&Resource> = resources.iter().collect();
    ordered.sort_by_key(|r| phase(r));
    let mut failures = Vec::new();
    for r in ordered {
        let result = match r {
            Resource::Proc { pid, start } => {
                // Only the very process recorded: a reused pid has another start time.
                if start_time(*pid) == Some(*start) {
                    // SAFETY: kill(2); the negative pid is the process group the harness made.
                    unsafe {
                        libc::kill(-(*pid as i32), libc::SIGKILL);
                        libc::kill(*pid as i32, libc::SIGKILL);
                    }
                }
                Ok(())
            }
            Resource::NftTable(t) => crate::firewall::delete_root_table(t),
            Resource::Netns(n) => netns::delete_netns(n),
            Resource::Link(l) => netns::delete_link(l),
            Resource::Dir(d) if d.exists() => {
                std::fs::remove_dir_all(d).with_context(|| format!("remove {}", d.display()))
            }
            Resource::Dir(_) => Ok(()),
        };
        if let Err(e) = result {
            failures.push(format!("{e:#}"));
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: every resource kind survives the round trip through its state-file line.
    #[test]
    fn resource_lines_round_trip() {
        let all = [
            Resource::Netns("bt3-host1".into()),
            Resource::Link("bt3v2".into()),
            Resource::NftTable("basalt_tc_3_2".into()),
            Resource::Proc { pid: 42, start: 7 },
            Resource::Dir("/tmp/basalt testcluster-3".into()),
        ];
        for r in all {
            assert_eq!(Resource::parse(&r.to_line()), Some(r));
        }
        assert_eq!(Resource::parse("bogus line"), None);
    }

    // Goal: our own start time is readable and a pid that cannot exist has none.
    #[test]
    fn start_time_of_self_and_missing_pid() {
        assert!(start_time(std::process::id()).is_some());
        assert_eq!(start_time(u32::MAX - 1), None);
    }
}
