//! The `threads` engine: a few dedicated threads, each running one blocking
//! pread/pwrite/fdatasync at a time. The device sees up to as many operations in flight as
//! there are threads. The fallback where io_uring is unavailable.

use super::completion::{Completer, Done};
use super::Op;
use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

struct Queue {
    jobs: VecDeque<(Op, Completer)>,
    closed: bool,
}

struct Shared {
    file: Arc<File>,
    queue: Mutex<Queue>,
    work: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The thread pool of one store.
pub(super) struct Threads {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

impl Threads {
    /// `threads` workers (at least one) on `file`.
    pub fn start(file: Arc<File>, threads: usize) -> std::io::Result<Threads> {
        let shared = Arc::new(Shared {
            file,
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                closed: false,
            }),
            work: Condvar::new(),
        });
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let shared = shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("store-io-{i}"))
                .spawn(move || worker(&shared))?;
            handles.push(handle);
        }
        Ok(Threads { shared, handles })
    }

    pub fn submit(&self, op: Op, done: Completer) {
        let mut queue = self.shared.lock();
        if queue.closed {
            // Dropping `done` completes it with "engine stopped".
            return;
        }
        queue.jobs.push_back((op, done));
        drop(queue);
        self.shared.work.notify_one();
    }
}

impl Drop for Threads {
    /// Run every accepted operation, then stop the workers.
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.work.notify_all();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

fn worker(shared: &Shared) {
    // Bound: exits once the queue is closed and empty; each job is one syscall loop.
    loop {
        let job = {
            let mut queue = shared.lock();
            loop {
                if let Some(job) = queue.jobs.pop_front() {
                    break Some(job);
                }
                if queue.closed {
                    break None;
                }
                queue = shared.work.wait(queue).unwrap_or_else(|e| e.into_inner());
            }
        };
        let Some((op, done)) = job else {
            return;
        };
        done.complete(run(&shared.file, op));
    }
}

/// Run one operation to its end with blocking syscalls.
pub(super) fn run(file: &File, op: Op) -> Done {
    match op {
        Op::Read { offset, mut buf } => Done {
            result: file.read_exact_at(buf.as_mut_slice(), offset),
            buf: Some(buf),
        },
        Op::Write { offset, buf } => Done {
            result: file.write_all_at(buf.as_slice(), offset),
            buf: Arc::try_unwrap(buf).ok(),
        },
        Op::Sync => Done {
            result: file.sync_data(),
            buf: None,
        },
    }
}
