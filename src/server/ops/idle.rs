//! A connection that fails once no byte has moved either way for a while:
//! an idle keep-alive connection, a client that stopped sending its
//! request, or one that stopped reading its response all time out, so none
//! can hold a connection slot forever.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// `inner`, with an idle timeout.
#[derive(Debug)]
pub(crate) struct IdleTimeout<T> {
    inner: T,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
}

impl<T> IdleTimeout<T> {
    pub(crate) fn new(inner: T, idle: Duration) -> Self {
        IdleTimeout::first_within(inner, idle, idle)
    }

    /// `inner`, whose first bytes must arrive within `first`, and which
    /// then times out after `idle` as [`IdleTimeout::new`]'s does (a
    /// connection past every slot that sends nothing gives its place up
    /// soon).
    pub(crate) fn first_within(inner: T, idle: Duration, first: Duration) -> Self {
        IdleTimeout {
            inner,
            idle,
            timer: Box::pin(tokio::time::sleep(first)),
        }
    }

    fn moved(&mut self) {
        self.timer.as_mut().reset(Instant::now() + self.idle);
    }

    /// After the inner stream said Pending: an error once the deadline passed.
    fn expired<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no bytes moved for {} s", self.idle.as_secs()),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleTimeout<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    self.moved();
                }
                Poll::Ready(r)
            }
            Poll::Pending => self.expired(cx),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Ready(r) => {
                if r.as_ref().is_ok_and(|n| *n > 0) {
                    self.moved();
                }
                Poll::Ready(r)
            }
            Poll::Pending => self.expired(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => {
                if r.as_ref().is_ok_and(|n| *n > 0) {
                    self.moved();
                }
                Poll::Ready(r)
            }
            Poll::Pending => self.expired(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => self.expired(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
