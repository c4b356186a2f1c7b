//! The `uring` engine: one thread per store owns an io_uring. Submitters queue operations and
//! wake it through an eventfd (whose read is itself an operation on the ring); it turns every
//! queued operation into a submission entry, submits them together, and completes each
//! operation as its completion arrives (resubmitting the rest of a short transfer).

use super::completion::{Completer, Done};
use super::Op;
use io_uring::{opcode, types, IoUring};
use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Submission queue entries; at most this many operations minus one (the eventfd's read)
/// are in flight at once.
const ENTRIES: u32 = 256;
/// `user_data` of the eventfd read.
const WAKE: u64 = u64::MAX;

struct Queue {
    jobs: VecDeque<(Op, Completer)>,
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    eventfd: OwnedFd,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local buffer to an eventfd this struct owns.
        // A failure (the counter saturated) still leaves the ring thread woken.
        let _ = unsafe { libc::write(self.eventfd.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

/// The ring of one store.
pub(super) struct Uring {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Uring {
    /// A ring on `file`; fails where the kernel refuses io_uring (then the store uses the
    /// `threads` engine).
    pub fn start(file: Arc<File>) -> std::io::Result<Uring> {
        let ring = IoUring::new(ENTRIES)?;
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nothing else owns.
        let eventfd = unsafe { OwnedFd::from_raw_fd(fd) };
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                closed: false,
            }),
            eventfd,
        });
        let ring_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("store-uring".into())
            .spawn(move || RingThread::new(ring, file, ring_shared).run())?;
        Ok(Uring {
            shared,
            thread: Some(thread),
        })
    }

    pub fn submit(&self, op: Op, done: Completer) {
        let mut queue = self.shared.lock();
        if queue.closed {
            return;
        }
        // The ring thread drains the whole queue whenever it wakes: only the first job
        // into an empty queue needs to wake it.
        let was_empty = queue.jobs.is_empty();
        queue.jobs.push_back((op, done));
        drop(queue);
        if was_empty {
            self.shared.wake();
        }
    }
}

impl Drop for Uring {
    /// Run every accepted operation, then stop the ring thread.
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One operation on the ring: the operation (owning its buffer, whose address the kernel
/// uses until the completion), its caller, and how many bytes are done.
struct InFlight {
    op: Op,
    done: Completer,
    transferred: usize,
}

struct RingThread {
    ring: IoUring,
    file: Arc<File>,
    shared: Arc<Shared>,
    /// Operations on the ring, by `user_data` (their index); None: a free entry.
    slots: Vec<Option<InFlight>>,
    free: Vec<usize>,
    in_flight: usize,
    /// The eventfd read's 8-byte target. Leaked (8 bytes per store): the read may still be
    /// armed when the thread ends, and the kernel tears a ring down asynchronously.
    wake_buf: &'static mut [u8; 8],
}

impl RingThread {
    fn new(ring: IoUring, file: Arc<File>, shared: Arc<Shared>) -> RingThread {
        RingThread {
            ring,
            file,
            shared,
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            wake_buf: Box::leak(Box::new([0; 8])),
        }
    }

    fn run(mut self) {
        let mut wake_armed = false;
        let mut closed = false;
        // Bound: ends once the queue is closed and every accepted operation completed;
        // each round submits and waits for at least one completion.
        loop {
            if !wake_armed && !closed {
                let entry = opcode::Read::new(
                    types::Fd(self.shared.eventfd.as_raw_fd()),
                    self.wake_buf.as_mut_ptr(),
                    8,
                )
                .build()
                .user_data(WAKE);
                self.push(&entry);
                wake_armed = true;
            }
            closed |= self.take_queued();
            if closed && self.in_flight == 0 {
                // The eventfd read may still be armed; its target is never freed.
                return;
            }
            if let Err(e) = self.ring.submit_and_wait(1) {
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                self.fail_all(&e);
                return;
            }
            let completions: Vec<(u64, i32)> = self
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            for (user_data, result) in completions {
                if user_data == WAKE {
                    wake_armed = false;
                } else {
                    self.complete(user_data as usize, result);
                }
            }
        }
    }

    /// Move queued operations onto the ring while there is room; true once the queue is
    /// closed and empty.
    fn take_queued(&mut self) -> bool {
        let room = ENTRIES as usize - 1 - self.in_flight;
        let (jobs, closed): (Vec<_>, bool) = {
            let mut queue = self.shared.lock();
            let n = queue.jobs.len().min(room);
            (
                queue.jobs.drain(..n).collect(),
                queue.closed && queue.jobs.is_empty(),
            )
        };
        for (op, done) in jobs {
            let index = match self.free.pop() {
                Some(i) => i,
                None => {
                    self.slots.push(None);
                    self.slots.len() - 1
                }
            };
            self.slots[index] = Some(InFlight {
                op,
                done,
                transferred: 0,
            });
            self.in_flight += 1;
            self.submit_slot(index);
        }
        closed
    }

    /// Put (the rest of) the operation at `index` on the submission queue.
    fn submit_slot(&mut self, index: usize) {
        let fd = types::Fd(self.file.as_raw_fd());
        let Some(f) = self.slots[index].as_mut() else {
            return;
        };
        let at = f.transferred;
        let entry = match &mut f.op {
            Op::Read { offset, buf } => {
                let len = (buf.len() - at) as u32;
                // SAFETY (for the kernel's use of the pointer): buf lives in self.slots until
                // this operation's completion is reaped.
                let ptr = buf.as_mut_ptr().wrapping_add(at);
                opcode::Read::new(fd, ptr, len)
                    .offset(*offset + at as u64)
                    .build()
            }
            Op::Write { offset, buf } => {
                let len = (buf.len() - at) as u32;
                let ptr = buf.as_slice().as_ptr().wrapping_add(at);
                opcode::Write::new(fd, ptr, len)
                    .offset(*offset + at as u64)
                    .build()
            }
            Op::Sync => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
        };
        self.push(&entry.user_data(index as u64));
    }

    fn push(&mut self, entry: &io_uring::squeue::Entry) {
        // Bound: at most ENTRIES entries are ever outstanding, so after one submit the
        // queue has room.
        loop {
            // SAFETY: every pointer in an entry points into a buffer owned by self.slots or
            // self.wake_buf, which stay alive and unmoved until the entry's completion.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return;
            }
            if let Err(e) = self.ring.submit() {
                if e.raw_os_error() != Some(libc::EINTR) && e.raw_os_error() != Some(libc::EBUSY) {
                    self.fail_all(&e);
                    return;
                }
            }
        }
    }

    /// The completion of the operation at `index` arrived with `result` (bytes, or -errno).
    fn complete(&mut self, index: usize, result: i32) {
        let Some(f) = self.slots.get_mut(index).and_then(Option::as_mut) else {
            return;
        };
        let outcome = if result == -libc::EINTR || result == -libc::EAGAIN {
            None
        } else if result < 0 {
            Some(Err(std::io::Error::from_raw_os_error(-result)))
        } else {
            let len = match &f.op {
                Op::Read { buf, .. } => buf.len(),
                Op::Write { buf, .. } => buf.len(),
                Op::Sync => 0,
            };
            f.transferred += result as usize;
            if f.transferred >= len {
                Some(Ok(()))
            } else if result == 0 {
                Some(Err(match f.op {
                    Op::Read { .. } => std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
                    _ => std::io::Error::from(std::io::ErrorKind::WriteZero),
                }))
            } else {
                None
            }
        };
        match outcome {
            // A short transfer or an interrupted one: submit the rest.
            None => self.submit_slot(index),
            Some(result) => {
                if let Some(f) = self.slots[index].take() {
                    self.free.push(index);
                    self.in_flight -= 1;
                    f.done.complete(Done {
                        result,
                        buf: f.op.into_buf(),
                    });
                }
            }
        }
    }

    /// The ring itself failed: nothing can complete through it any more. Operations on it
    /// cannot be completed safely (the kernel may still use their buffers), so their
    /// buffers are leaked and their callers told; queued ones are failed.
    fn fail_all(&mut self, e: &std::io::Error) {
        for slot in self.slots.iter_mut() {
            if let Some(f) = slot.take() {
                let InFlight { op, done, .. } = f;
                std::mem::forget(op);
                done.complete(Done {
                    result: Err(std::io::Error::other(format!("io_uring failed: {e}"))),
                    buf: None,
                });
            }
        }
        self.in_flight = 0;
        let mut queue = self.shared.lock();
        queue.closed = true;
        queue.jobs.clear();
    }
}
