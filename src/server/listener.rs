//! The plain-HTTP listener: at most `max_connections` connections at once
//! (further ones wait in the kernel's backlog until a slot frees), and
//! `TCP_NODELAY` on each, since headers and body leave in separate writes
//! and Nagle's algorithm with delayed ACKs would stall small responses.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A listener that caps concurrent connections.
#[derive(Debug)]
pub struct CappedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
}

impl CappedListener {
    pub fn new(inner: TcpListener, max_connections: usize) -> Self {
        CappedListener {
            inner,
            slots: Arc::new(Semaphore::new(max_connections.max(1))),
        }
    }
}

/// A connection holding one of the listener's slots until it is dropped.
#[derive(Debug)]
pub struct CappedStream {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl axum::serve::Listener for CappedListener {
    type Io = CappedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let slot = match Arc::clone(&self.slots).acquire_owned().await {
            Ok(s) => s,
            // The semaphore is never closed.
            Err(_) => std::future::pending().await,
        };
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
                    }
                    return (
                        CappedStream {
                            stream,
                            _slot: slot,
                        },
                        addr,
                    );
                }
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

impl AsyncRead for CappedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for CappedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
