//! A request body that fails when its client stops sending: a stalled upload is cut off and
//! nothing of it becomes visible (the PUT fails; its data is reclaimed like any failed one).

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// The error a stalled body ends with.
#[derive(Debug, thiserror::Error)]
#[error("the client sent no body bytes for {0:?}: request cut off")]
pub struct BodyIdle(pub Duration);

/// `Incoming` with a limit on the time between two frames.
pub struct IdleBody {
    inner: Incoming,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
}

impl IdleBody {
    /// Wrap `inner`: each wait for its next frame may last at most `idle`.
    pub fn new(inner: Incoming, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
        }
    }
}

impl Body for IdleBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let next = Instant::now() + this.idle;
                this.timer.as_mut().reset(next);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(BodyIdle(this.idle).into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
