//! A manifest rendering past `limits.render_cap`, streamed: written on the
//! blocking pool in 64 KiB chunks that wait in a channel of four for the
//! connection to take them. Such a request holds at most about 320 KiB of
//! its manifest however many objects the file has; it is neither shared
//! nor kept (each request renders its own, at the pace its client reads).
//! If the rendering fails after the headers went out, the body ends with
//! an error and the client sees a cut connection, never a short manifest
//! that looks whole.

use std::io::{self, Write};
use std::sync::Arc;

use axum::body::Body;
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::error::AppError;
use crate::server::catalog::Served;
use crate::server::render::renderings::Kind;
use crate::server::render::{self, manifest::Heading};

const CHUNK: usize = 64 * 1024;
const QUEUED: usize = 4;

type Piece = Result<Bytes, io::Error>;

/// A writer that hands full chunks to the response body.
struct Sink {
    buf: Vec<u8>,
    tx: mpsc::Sender<Piece>,
}

impl Sink {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx
            .blocking_send(Ok(Bytes::from(chunk)))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        // Never more than a chunk at once, however large `data` is.
        let room = CHUNK.saturating_sub(self.buf.len()).max(1);
        let n = data.len().min(room);
        self.buf
            .extend_from_slice(data.get(..n).unwrap_or_default());
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The rendering's ETag and source, and a body that streams it.
pub(super) async fn manifest(
    served: Arc<Served>,
    kind: Kind,
    select: Vec<String>,
) -> Result<(Heading, Body), AppError> {
    let (heading_tx, heading_rx) = oneshot::channel();
    let (tx, mut rx) = mpsc::channel::<Piece>(QUEUED);
    tokio::task::spawn_blocking(move || {
        let mut sink = Sink {
            buf: Vec::with_capacity(CHUNK),
            tx,
        };
        let heading = |h| heading_tx.send(h).is_ok();
        let written = render::manifest::http_streamed(&served, kind, &select, heading, &mut sink)
            .and_then(|()| sink.send());
        match written {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
            Err(e) => {
                tracing::warn!(file = %served.path, error = %e, "streamed manifest cut short");
                let _ = sink.tx.blocking_send(Err(e));
            }
        }
    });
    let heading = heading_rx
        .await
        .map_err(|_| AppError::internal("the streamed manifest ended before its headers"))?;
    let pieces = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    Ok((heading, Body::from_stream(pieces)))
}
