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

/// The caller's side: a future of the operation's [`Done`], or [`Completion::wait`].
pub struct Completion(Arc<Shared>);

/// The engine's side: completes the operation once. Dropped without completing (the engine
/// stopped), it completes it with an error, so no caller waits forever.
pub(crate) struct Completer(Option<Arc<Shared>>);

/// A completion pair for one operation.
pub(crate) fn pair() -> (Completer, Completion) {
    let shared = Arc::new(Shared::default());
    (Completer(Some(shared.clone())), Completion(shared))
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
        self.0.lock().done.is_some()
    }

    /// Block the calling thread until the operation ends. For synchronous code only: an
    /// async task awaits the completion instead.
    pub fn wait(self) -> Done {
        let mut state = self.0.lock();
        // Bound: the engine completes every operation it accepted (or its Completer's drop
        // does), and each wake-up re-checks.
        loop {
            if let Some(done) = state.done.take() {
                return done;
            }
            state = self.0.ready.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Future for Completion {
    type Output = Done;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Done> {
        let mut state = self.0.lock();
        match state.done.take() {
            Some(done) => Poll::Ready(done),
            None => {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
