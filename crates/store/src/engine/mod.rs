//! The store's I/O engine (docs/design.md, "I/O engine, direct I/O and raw devices"): the only
//! code that touches a store's medium. Callers submit operations — read into an aligned
//! buffer, write one, fdatasync — and await their completion (or wait for it, in synchronous
//! code), so no async runtime thread ever waits on a device.

mod buf;
mod completion;
mod threads;
mod uring;

pub use buf::{AlignedBuf, ALIGN};
pub use completion::{Completion, Done};

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

/// One operation on the medium. Offsets and buffer lengths are multiples of [`ALIGN`] (what
/// direct I/O requires; the store's structures are whole blocks).
#[derive(Debug)]
pub enum Op {
    /// Fill `buf` from `offset`.
    Read {
        /// Byte offset on the medium.
        offset: u64,
        /// Where the bytes go (returned in [`Done::buf`]).
        buf: AlignedBuf,
    },
    /// Write all of `buf` at `offset`.
    Write {
        /// Byte offset on the medium.
        offset: u64,
        /// The bytes, shared: the store keeps serving reads from them until the write
        /// completes (returned in [`Done::buf`] when nobody else holds them).
        buf: Arc<AlignedBuf>,
    },
    /// fdatasync: every write that *completed* before this was submitted is durable (the
    /// device's volatile cache flushed). Writes still in flight are not covered.
    Sync,
}

impl Op {
    fn into_buf(self) -> Option<AlignedBuf> {
        match self {
            Op::Read { buf, .. } => Some(buf),
            Op::Write { buf, .. } => Arc::try_unwrap(buf).ok(),
            Op::Sync => None,
        }
    }
}

/// Which engine runs a store's I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// The calling thread runs each operation's syscall itself (a completion is ready when
    /// `submit` returns). What stores ran on before the engine; the default until the OSD
    /// awaits store calls instead of running them on its runtime threads.
    Inline,
    /// One io_uring per store, driven by one thread: batched submission.
    Uring,
    /// Blocking syscalls on a few dedicated threads (`threads` of them).
    Threads {
        /// How many operations may be in flight.
        threads: usize,
    },
}

impl EngineKind {
    /// Threads of the `threads` engine unless told otherwise.
    pub const DEFAULT_THREADS: usize = 8;

    /// `uring` or `threads`, as the command line and `osd ls` name it.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Inline => "inline",
            EngineKind::Uring => "uring",
            EngineKind::Threads { .. } => "threads",
        }
    }
}

impl std::str::FromStr for EngineKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "inline" => Ok(EngineKind::Inline),
            "uring" => Ok(EngineKind::Uring),
            "threads" => Ok(EngineKind::Threads {
                threads: EngineKind::DEFAULT_THREADS,
            }),
            other => Err(format!(
                "unknown I/O engine \"{other}\" (inline, uring or threads)"
            )),
        }
    }
}

enum Backend {
    Inline(Arc<File>),
    Uring(uring::Uring),
    Threads(threads::Threads),
}

/// The engine of one store: its medium, how it is opened, and who runs the I/O.
pub struct Engine {
    backend: Backend,
    kind: EngineKind,
    direct: bool,
}

impl Engine {
    /// Run `file`'s I/O with `kind`; `direct` says whether `file` was opened with O_DIRECT
    /// (see [`open_direct`]). Where io_uring is refused, the `threads` engine runs instead
    /// ([`Engine::kind`] says which one runs).
    pub fn start(file: Arc<File>, direct: bool, kind: EngineKind) -> std::io::Result<Engine> {
        if kind == EngineKind::Inline {
            return Ok(Engine {
                backend: Backend::Inline(file),
                kind,
                direct,
            });
        }
        if kind == EngineKind::Uring {
            if let Ok(ring) = uring::Uring::start(file.clone()) {
                return Ok(Engine {
                    backend: Backend::Uring(ring),
                    kind,
                    direct,
                });
            }
        }
        let threads = match kind {
            EngineKind::Threads { threads } => threads,
            EngineKind::Uring | EngineKind::Inline => EngineKind::DEFAULT_THREADS,
        };
        Ok(Engine {
            backend: Backend::Threads(threads::Threads::start(file, threads)?),
            kind: EngineKind::Threads { threads },
            direct,
        })
    }

    /// Start `op`; its outcome arrives through the returned completion.
    pub fn submit(&self, op: Op) -> Completion {
        match &self.backend {
            Backend::Inline(file) => {
                let (completer, completion) = completion::pair(None);
                completer.complete(threads::run(file, op));
                completion
            }
            Backend::Uring(r) => {
                let (completer, completion) = completion::pair(Some(r.helper()));
                r.submit(op, completer);
                completion
            }
            Backend::Threads(t) => {
                let (completer, completion) = completion::pair(None);
                t.submit(op, completer);
                completion
            }
        }
    }

    /// Start every operation of `ops` together (io_uring: one submission for all); their
    /// completions in the same order.
    pub fn submit_all(&self, ops: Vec<Op>) -> Vec<Completion> {
        match &self.backend {
            Backend::Uring(r) => {
                let mut completions = Vec::with_capacity(ops.len());
                let mut jobs = Vec::with_capacity(ops.len());
                for op in ops {
                    let (completer, completion) = completion::pair(Some(r.helper()));
                    completions.push(completion);
                    jobs.push((op, completer));
                }
                r.submit_all(jobs);
                completions
            }
            _ => ops.into_iter().map(|op| self.submit(op)).collect(),
        }
    }

    /// The engine that runs (after any fallback).
    pub fn kind(&self) -> EngineKind {
        self.kind
    }

    /// Whether I/O bypasses the page cache.
    pub fn direct(&self) -> bool {
        self.direct
    }
}

/// Open `path` for reading and writing with O_DIRECT, or without it where the filesystem
/// refuses it (tmpfs, some FUSE filesystems: EINVAL); the bool says which.
pub fn open_direct(path: &Path) -> std::io::Result<(File, bool)> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true);
    let direct = match options.clone().custom_flags(libc::O_DIRECT).open(path) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            return Ok((options.open(path)?, false))
        }
        Err(e) => return Err(e),
    };
    // Some filesystems accept the flag and refuse the I/O: probe one aligned read.
    let mut probe = AlignedBuf::zeroed(ALIGN);
    match std::os::unix::fs::FileExt::read_at(&direct, probe.as_mut_slice(), 0) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok((options.open(path)?, false)),
        _ => Ok((direct, true)),
    }
}

#[cfg(test)]
mod tests;
