//! Response bodies: our own short answers, and the backend's answer streamed through.
//!
//! [`UpstreamBody`] is where an attempt ends. It forwards the backend's frames, allows at most
//! `read_timeout` between two of them, and when the body ends completes the attempt as a
//! success and gives the connection back for reuse. If the backend fails mid-body the error is
//! passed to hyper, which closes the client connection instead of ending the response, so a
//! truncated answer never looks complete. If the client goes away first, dropping the body
//! completes the attempt as cancelled and closes the backend connection.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use balance::Outcome;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use crate::connections::Sender;
use crate::upstream::Attempt;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every response the proxy sends.
#[derive(Debug)]
pub enum ProxyBody {
    /// An answer of our own (errors, rejections).
    Local(Full<Bytes>),
    /// A backend's answer.
    Upstream(UpstreamBody),
}

impl ProxyBody {
    pub(crate) fn text(text: &'static str) -> ProxyBody {
        ProxyBody::Local(Full::new(Bytes::from_static(text.as_bytes())))
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Local(full) => Pin::new(full).poll_frame(cx).map_err(|e| match e {}),
            ProxyBody::Upstream(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Local(full) => full.is_end_stream(),
            ProxyBody::Upstream(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Local(full) => full.size_hint(),
            ProxyBody::Upstream(body) => body.size_hint(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("backend sent nothing for {0:?} (read_timeout) in the middle of the response body")]
struct BodyReadTimeout(Duration);

#[derive(Debug)]
pub struct UpstreamBody {
    inner: Incoming,
    attempt: Attempt,
    /// The connection, until the body has ended and it goes back to the idle list.
    sender: Option<Sender>,
    read_timeout: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl UpstreamBody {
    pub(crate) fn new(
        inner: Incoming,
        attempt: Attempt,
        sender: Sender,
        read_timeout: Duration,
    ) -> UpstreamBody {
        UpstreamBody {
            inner,
            attempt,
            sender: Some(sender),
            read_timeout,
            deadline: Box::pin(tokio::time::sleep(read_timeout)),
        }
    }

    fn finish(&mut self, outcome: Outcome) {
        self.attempt.complete(outcome);
        if let Some(sender) = self.sender.take()
            && outcome == Outcome::Success
        {
            self.attempt.upstream().reuse(self.attempt.backend, sender);
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.sender.is_none() {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let next = Instant::now() + this.read_timeout;
                this.deadline.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                tracing::warn!(
                    backend = %this.attempt.upstream().backend_addr(this.attempt.backend),
                    error = %e,
                    "backend failed in the middle of the response body; closing the client connection"
                );
                this.finish(Outcome::Failure);
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(None) => {
                this.finish(Outcome::Success);
                Poll::Ready(None)
            }
            Poll::Pending => {
                ready!(this.deadline.as_mut().poll(cx));
                this.finish(Outcome::Failure);
                Poll::Ready(Some(Err(BodyReadTimeout(this.read_timeout).into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        if self.sender.is_some() {
            // hyper may not poll a body it knows is empty (HEAD, 204, 304, Content-Length: 0).
            let outcome = if self.inner.is_end_stream() {
                Outcome::Success
            } else {
                Outcome::Cancelled
            };
            self.finish(outcome);
        }
    }
}
