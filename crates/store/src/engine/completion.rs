//! The outcome of one engine operation, awaited by async code or waited for by synchronous
//! code (recovery at open), completed once by the engine thread that ran it.

use super::buf::AlignedBuf;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// What an operation ended with: its result and, for reads and writes, the buffer back.
#[derive(Debug)]
pub struct Done {
    /// Ok once every byte was transferred (or the sync returned).
    pub result: std::io::Result<()>,
    /// The operation's buffer (None for a sync).
    pub buf: Option<AlignedBuf>,
}

#[derive(Default)]
struct State {
    done: Option<Done>,
    waker: Option<Waker>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    ready: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock leaves State consistent (plain assignments).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a synchronous waiter calls to make progress itself when its engine needs someone
/// to reap completions (io_uring): one round of reaping, or a short wait for a completion.
pub(crate) trait Help: Send + Sync {
    fn help(&self);
}

/// The caller's side: a future of the operation's [`Done`], or [`Completion::wait`].
pub struct Completion {
    shared: Arc<Shared>,
    help: Option<Arc<dyn Help>>,
}

/// The engine's side: completes the operation once. Dropped without completing (the engine
/// stopped), it completes it with an error, so no caller waits forever.
pub(crate) struct Completer(Option<Arc<Shared>>);

/// A completion pair for one operation; a waiter calls `help` while it waits, if given.
pub(crate) fn pair(help: Option<Arc<dyn Help>>) -> (Completer, Completion) {
    let shared = Arc::new(Shared::default());
    (Completer(Some(shared.clone())), Completion { shared, help })
}

impl Completer {
    /// Hand `done` to the caller and wake it.
    pub fn complete(mut self, done: Done) {
        if let Some(shared) = self.0.take() {
            Self::finish(&shared, done);
        }
    }

    fn finish(shared: &Shared, done: Done) {
        let waker = {
            let mut state = shared.lock();
            state.done = Some(done);
            state.waker.take()
        };
        shared.ready.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Drop for Completer {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            let error = std::io::Error::other("the store's I/O engine stopped");
            Self::finish(
                &shared,
                Done {
                    result: Err(error),
                    buf: None,
                },
            );
        }
    }
}

impl Completion {
    /// Has the operation ended? (Then [`Completion::wait`] returns at once.)
    pub fn is_ready(&self) -> bool {
        self.shared.lock().done.is_some()
    }

    /// Block the calling thread until the operation ends. For synchronous code only: an
    /// async task awaits the completion instead.
    pub fn wait(self) -> Done {
        // Bound: the engine completes every operation it accepted (or its Completer's drop
        // does); each round re-checks after a wake-up or a bounded round of help.
        loop {
            let mut state = self.shared.lock();
            if let Some(done) = state.done.take() {
                return done;
            }
            match &self.help {
                Some(help) => {
                    drop(state);
                    help.help();
                }
                None => {
                    let mut state = self
                        .shared
                        .ready
                        .wait(state)
                        .unwrap_or_else(|e| e.into_inner());
                    if let Some(done) = state.done.take() {
                        return done;
                    }
                }
            }
        }
    }
}

impl Future for Completion {
    type Output = Done;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Done> {
        let mut state = self.shared.lock();
        match state.done.take() {
            Some(done) => Poll::Ready(done),
            None => {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
