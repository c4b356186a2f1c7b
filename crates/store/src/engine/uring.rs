//! The `uring` engine: one io_uring per store, shared by every thread that uses the store.
//!
//! A submitter pushes its operation and enters the kernel itself, then reaps whatever
//! completions are there — its own too when the kernel finished it during submission (tmpfs,
//! a page-cache hit). No thread hands an operation to another thread. Completions that
//! arrive later (a device's interrupt) are reaped by a *reaper*: a task on the Tokio runtime
//! the store was opened in, woken through an eventfd the ring signals on every completion
//! (the runtime's own epoll, the wake-up it uses for sockets: the worker the device
//! interrupted is the one that runs the awaiting task), or, with no runtime, a thread blocked
//! on that eventfd. A synchronous waiter reaps for itself ([`Ring::help`]), so no thread
//! depends on a reaper that cannot run (a runtime whose workers are all waiting).

use super::completion::{Completer, Done, Help};
use super::Op;
use io_uring::{opcode, types, IoUring};
use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Submission queue entries; at most this many operations minus one are on the ring at
/// once, so the submission queue never fills (each operation has at most one entry queued).
const ENTRIES: u32 = 256;
/// How long a synchronous waiter sleeps in the kernel before looking again: a reaper may
/// have taken its completion meanwhile, leaving nothing to wake it.
const HELP_WAIT_NS: u32 = 2_000_000;
/// Attempts at an `io_uring_enter` the kernel refuses for a moment (EAGAIN, EBUSY) before
/// the ring counts as failed.
const ENTER_ATTEMPTS: u32 = 1000;

/// One operation on the ring: the operation (owning its buffer, whose address the kernel
/// uses until the completion), its caller, and how many bytes are done.
struct InFlight {
    op: Op,
    done: Completer,
    transferred: usize,
}

/// Callers to complete once the ring's lock is released.
type Finished = Vec<(Completer, Done)>;

struct State {
    /// Operations on the ring, by `user_data` (their index); None: a free entry.
    slots: Vec<Option<InFlight>>,
    free: Vec<usize>,
    in_flight: usize,
    /// Accepted operations that found the ring full, started as room frees.
    waiting: VecDeque<(Op, Completer)>,
    /// The engine was dropped: nothing new is accepted.
    closed: bool,
    /// The ring failed; nothing completes through it any more.
    failed: Option<String>,
    /// A reaper (task or thread) is running.
    reaper_alive: bool,
    /// Reused buffer of reaped completions.
    cqes: Vec<(u64, i32)>,
}

/// The ring of one store and what is on it.
pub(super) struct Ring {
    ring: IoUring,
    file: Arc<File>,
    /// Registered with the ring: signalled on every completion; the reaper waits on it.
    eventfd: OwnedFd,
    /// Guards the submission and completion queues (one user at a time) and the table.
    state: Mutex<State>,
    /// The fallback reaper thread, if one was started.
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// The engine's handle on its ring.
pub(super) struct Uring {
    ring: Arc<Ring>,
}

impl Uring {
    /// A ring on `file`; fails where the kernel refuses io_uring (then the store uses the
    /// `threads` engine). Inside a Tokio runtime (whose I/O driver must be enabled) the
    /// reaper is a task of that runtime; elsewhere a thread.
    pub fn start(file: Arc<File>) -> std::io::Result<Uring> {
        let ring = IoUring::new(ENTRIES)?;
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nothing else owns.
        let eventfd = unsafe { OwnedFd::from_raw_fd(fd) };
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        let ring = Arc::new(Ring {
            ring,
            file,
            eventfd,
            state: Mutex::new(State {
                slots: Vec::new(),
                free: Vec::new(),
                in_flight: 0,
                waiting: VecDeque::new(),
                closed: false,
                failed: None,
                reaper_alive: false,
                cqes: Vec::new(),
            }),
            thread: Mutex::new(None),
        });
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => ring.spawn_task(&handle)?,
            Err(_) => ring.spawn_thread()?,
        }
        Ok(Uring { ring })
    }

    pub fn submit(&self, op: Op, done: Completer) {
        self.ring.submit(vec![(op, done)]);
    }

    /// Submit every operation of `ops` with one `io_uring_enter` (the block layer then
    /// sees them together: one notification of a virtual disk instead of one each).
    pub fn submit_all(&self, ops: Vec<(Op, Completer)>) {
        self.ring.submit(ops);
    }

    /// What a synchronous waiter on this ring's operations calls to make progress.
    pub fn helper(&self) -> Arc<dyn Help> {
        self.ring.clone()
    }
}

impl Drop for Uring {
    /// Run every accepted operation, then stop the reaper.
    fn drop(&mut self) {
        self.ring.lock().closed = true;
        // Bound: every operation on the ring completes (or the ring fails, which empties
        // it); each round reaps or waits at most HELP_WAIT_NS.
        while !self.ring.idle() {
            self.ring.help();
        }
        self.ring.wake();
        let thread = self
            .ring
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Help for Ring {
    /// Reap what is there; with nothing there, wait in the kernel for a completion (briefly:
    /// a reaper may take it first).
    fn help(&self) {
        if self.reap() > 0 {
            return;
        }
        let ts = types::Timespec::new().nsec(HELP_WAIT_NS);
        let args = types::SubmitArgs::new().timespec(&ts);
        // ETIME, EINTR: look again. Entries another thread queued may be submitted by this
        // call: harmless, the kernel takes each queued entry once.
        let _ = self.ring.submitter().submit_with_args(1, &args);
        self.reap();
    }
}

impl Ring {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update of State is completed before anything that can panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Nothing on the ring and nothing waiting for room.
    fn idle(&self) -> bool {
        let st = self.lock();
        st.in_flight == 0 && st.waiting.is_empty()
    }

    fn submit(self: &Arc<Self>, ops: Vec<(Op, Completer)>) {
        let mut finished = Finished::new();
        let need_reaper;
        {
            let mut st = self.lock();
            if let Some(why) = &st.failed {
                let why = why.clone();
                for (op, done) in ops {
                    finished.push((done, failed(&why, op.into_buf())));
                }
                need_reaper = false;
            } else if st.closed {
                // The completers' drop tells the callers the engine stopped.
                drop(ops);
                need_reaper = false;
            } else {
                for (op, done) in ops {
                    self.start(&mut st, op, done);
                }
                self.enter(&mut st, &mut finished);
                self.reap_locked(&mut st, &mut finished);
                need_reaper = !st.reaper_alive && st.in_flight > 0;
            }
        }
        for (c, d) in finished {
            c.complete(d);
        }
        if need_reaper {
            // The runtime that ran the reaper task is gone: a thread takes over. A failure
            // to start one leaves synchronous waiters (who reap themselves) working.
            let _ = self.spawn_thread();
        }
    }

    /// Put `op` on the ring, or in the waiting queue when the ring is full.
    fn start(&self, st: &mut State, op: Op, done: Completer) {
        if st.in_flight >= ENTRIES as usize - 1 {
            st.waiting.push_back((op, done));
            return;
        }
        let index = match st.free.pop() {
            Some(i) => i,
            None => {
                st.slots.push(None);
                st.slots.len() - 1
            }
        };
        st.slots[index] = Some(InFlight {
            op,
            done,
            transferred: 0,
        });
        st.in_flight += 1;
        self.push_slot(st, index);
    }

    /// Queue (the rest of) the operation at `index` on the submission queue.
    fn push_slot(&self, st: &mut State, index: usize) {
        let fd = types::Fd(self.file.as_raw_fd());
        let Some(f) = st.slots[index].as_mut() else {
            return;
        };
        let at = f.transferred;
        let entry = match &mut f.op {
            Op::Read { offset, buf } => {
                let len = (buf.len() - at) as u32;
                // The kernel writes through this pointer until the completion is reaped;
                // buf lives in st.slots until then.
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
        let entry = entry.user_data(index as u64);
        // SAFETY: the state lock is held, so no other SubmissionQueue of this ring exists;
        // every pointer in the entry points into a buffer owned by st.slots, which stays
        // alive and unmoved until the entry's completion is reaped.
        let pushed = unsafe { self.ring.submission_shared().push(&entry) };
        if pushed.is_err() {
            // Cannot happen: each of at most ENTRIES - 1 operations has at most one entry
            // queued. Treat it as the ring failing rather than lose the operation.
            self.fail_all(st, "submission queue full");
        }
    }

    /// Submit every queued entry (one `io_uring_enter`).
    fn enter(&self, st: &mut State, finished: &mut Finished) {
        for _ in 0..ENTER_ATTEMPTS {
            // SAFETY: the state lock is held, so no other SubmissionQueue of this ring exists.
            if unsafe { self.ring.submission_shared().is_empty() } {
                return;
            }
            match self.ring.submitter().submit() {
                Ok(_) => return,
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    // Completions must be reaped first, or the kernel is short of memory.
                    Some(libc::EBUSY) | Some(libc::EAGAIN) => {
                        self.reap_cq(st, finished);
                        std::thread::sleep(std::time::Duration::from_micros(50));
                    }
                    _ => {
                        self.fail_all(st, &format!("io_uring_enter: {e}"));
                        return;
                    }
                },
            }
        }
        self.fail_all(st, "io_uring_enter kept refusing submissions");
    }

    /// Reap every completion there; returns how many operations ended.
    fn reap(&self) -> usize {
        let mut finished = Finished::new();
        {
            let mut st = self.lock();
            self.reap_locked(&mut st, &mut finished);
        }
        let n = finished.len();
        for (c, d) in finished {
            c.complete(d);
        }
        n
    }

    /// Reap until the completion queue stays empty, restarting short transfers and starting
    /// operations that waited for room.
    fn reap_locked(&self, st: &mut State, finished: &mut Finished) {
        // Bound: each round consumes completions of operations on the ring; a round that
        // finds none ends the loop, and every operation ends after finitely many rounds.
        loop {
            if self.reap_cq(st, finished) == 0 {
                return;
            }
            while st.in_flight < ENTRIES as usize - 1 && st.failed.is_none() {
                let Some((op, done)) = st.waiting.pop_front() else {
                    break;
                };
                self.start(st, op, done);
            }
            self.enter(st, finished);
        }
    }

    /// Take the completions in the completion queue; returns how many there were.
    fn reap_cq(&self, st: &mut State, finished: &mut Finished) -> usize {
        let mut cqes = std::mem::take(&mut st.cqes);
        cqes.clear();
        // SAFETY: the state lock is held, so no other CompletionQueue of this ring exists.
        cqes.extend(unsafe { self.ring.completion_shared() }.map(|c| (c.user_data(), c.result())));
        let n = cqes.len();
        for &(user_data, result) in &cqes {
            self.complete(st, user_data as usize, result, finished);
        }
        st.cqes = cqes;
        n
    }

    /// The completion of the operation at `index` arrived with `result` (bytes, or -errno).
    fn complete(&self, st: &mut State, index: usize, result: i32, finished: &mut Finished) {
        let Some(f) = st.slots.get_mut(index).and_then(Option::as_mut) else {
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
            // A short transfer or an interrupted one: queue the rest (submitted by the
            // caller's enter).
            None => self.push_slot(st, index),
            Some(result) => {
                if let Some(f) = st.slots[index].take() {
                    st.free.push(index);
                    st.in_flight -= 1;
                    finished.push((
                        f.done,
                        Done {
                            result,
                            buf: f.op.into_buf(),
                        },
                    ));
                }
            }
        }
    }

    /// The ring itself failed: nothing can complete through it any more. Operations on it
    /// cannot be completed safely (the kernel may still use their buffers), so their
    /// buffers are leaked and their callers told; waiting ones are failed.
    fn fail_all(&self, st: &mut State, why: &str) {
        let why = format!("io_uring failed: {why}");
        for slot in st.slots.iter_mut() {
            if let Some(f) = slot.take() {
                let InFlight { op, done, .. } = f;
                std::mem::forget(op);
                done.complete(failed(&why, None));
            }
        }
        st.in_flight = 0;
        for (op, done) in st.waiting.drain(..) {
            done.complete(failed(&why, op.into_buf()));
        }
        st.failed = Some(why);
    }

    /// Wake the reaper (it ends once the engine is closed and idle).
    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local buffer to an eventfd this struct owns.
        // A failure (the counter saturated) still leaves the reaper woken.
        let _ = unsafe { libc::write(self.eventfd.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    /// Reset the eventfd's counter.
    fn drain_eventfd(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live local buffer from an eventfd this struct
        // owns (non-blocking).
        let _ = unsafe { libc::read(self.eventfd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
    }

    /// The reaper's work is over: the engine was dropped and nothing is left on the ring.
    fn finished(&self) -> bool {
        let st = self.lock();
        st.closed && st.in_flight == 0 && st.waiting.is_empty()
    }

    fn spawn_task(self: &Arc<Self>, handle: &tokio::runtime::Handle) -> std::io::Result<()> {
        let _context = handle.enter();
        // SAFETY: EventFd's descriptor is the ring's eventfd, owned by the Ring the EventFd
        // holds an Arc of: open and the same for the AsyncFd's whole life.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(
                EventFd(self.clone()),
                tokio::io::Interest::READABLE,
            )
        }
        .map_err(|e| e.into_parts().1)?;
        let alive = ReaperAlive::new(self.clone());
        handle.spawn(async move {
            let _alive = alive;
            // Bound: ends when the engine is dropped and idle, or with the runtime.
            loop {
                let Ok(mut ready) = fd.readable().await else {
                    return;
                };
                let ring = &fd.get_ref().0;
                // A completion posted after this drain signals the eventfd again; the
                // reactor's readiness tick keeps that signal from being cleared here.
                ring.drain_eventfd();
                ready.clear_ready();
                ring.reap();
                if ring.finished() {
                    return;
                }
            }
        });
        Ok(())
    }

    fn spawn_thread(self: &Arc<Self>) -> std::io::Result<()> {
        let mut slot = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        if self.lock().reaper_alive {
            return Ok(());
        }
        let alive = ReaperAlive::new(self.clone());
        let ring = self.clone();
        let handle = std::thread::Builder::new()
            .name("store-uring".into())
            .spawn(move || {
                let _alive = alive;
                // Bound: ends once the engine is dropped and idle; each round waits for the
                // eventfd, which every completion and the drop signal.
                while !ring.finished() {
                    let mut pfd = libc::pollfd {
                        fd: ring.eventfd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd for the duration of the call.
                    unsafe { libc::poll(&mut pfd, 1, -1) };
                    ring.drain_eventfd();
                    ring.reap();
                }
            })?;
        // A previous thread (if any) has ended: it marked itself gone.
        *slot = Some(handle);
        Ok(())
    }
}

/// The eventfd as the runtime's reactor sees it.
struct EventFd(Arc<Ring>);

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.eventfd.as_raw_fd()
    }
}

/// Held by the running reaper: marks it alive, and gone when dropped (the reaper ended, or
/// its runtime dropped the task), so the next submission starts a thread instead.
struct ReaperAlive(Arc<Ring>);

impl ReaperAlive {
    fn new(ring: Arc<Ring>) -> ReaperAlive {
        ring.lock().reaper_alive = true;
        ReaperAlive(ring)
    }
}

impl Drop for ReaperAlive {
    fn drop(&mut self) {
        self.0.lock().reaper_alive = false;
    }
}

fn failed(why: &str, buf: Option<super::AlignedBuf>) -> Done {
    Done {
        result: Err(std::io::Error::other(why.to_string())),
        buf,
    }
}
