//! The control stream's sending half, owned by one task: messages go out
//! in the order given, and the stream has strict priority over every
//! component stream, so a manifest is never stuck behind component bytes
//! (PROTOCOL.md section 2).
//!
//! Closing goes through here too. A CONNECTION_CLOSE is sent once, and is
//! lost when the client's receive buffer is full of component data; the
//! client would then be left with silence. So the close is announced as an
//! `error` without an id on this stream, which is retransmitted until
//! acknowledged, before the connection is closed with the same code.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use quinn::{Connection, SendStream, VarInt};
use tokio::sync::{mpsc, oneshot};
use ztp_proto::{frame, frame_chunks, Close, ErrorMsg, Message, ServerSession};

use super::cancel::RequestCtl;

/// The connection's requests in flight, shared by its tasks.
pub(super) type Session = Arc<Mutex<ServerSession<Arc<RequestCtl>>>>;

/// How long a closing connection waits for its `error` to be acknowledged.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug)]
enum Out {
    /// A message, and who wants to know once its bytes are with quinn.
    Message(Box<Message>, Option<oneshot::Sender<()>>),
    Close(Close),
}

/// A handle on the control stream's writer.
#[derive(Debug, Clone)]
pub(super) struct Control {
    tx: mpsc::Sender<Out>,
    session: Session,
    conn: Connection,
}

impl Control {
    /// Starts the writer for `send`, the server's half of `conn`'s control
    /// stream. A client that accepts none of its bytes for `stall` is
    /// closed with `stalled` (its control stream cannot carry the
    /// announcement).
    pub(super) fn spawn(
        mut send: SendStream,
        conn: Connection,
        session: Session,
        stall: Duration,
    ) -> (Control, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::channel::<Out>(64);
        let control = Control {
            tx,
            session,
            conn: conn.clone(),
        };
        let writer = tokio::spawn(async move {
            let _ = send.set_priority(i32::MAX);
            while let Some(out) = rx.recv().await {
                match out {
                    Out::Message(m, queued) => {
                        // A manifest's bytes go out as the renderings
                        // cache keeps them, after the rest of the frame.
                        let mut chunks = match frame_chunks(*m) {
                            Ok(chunks) => chunks,
                            // A message that cannot be framed (none the
                            // daemon makes: manifests are capped far below
                            // 4 GiB): streams must not follow it unsaid.
                            Err(e) => {
                                tracing::error!(error = %e, "a message could not be framed");
                                let reason = format!("a message could not be framed: {e}");
                                let c = Close {
                                    code: ztp_proto::Code::Internal,
                                    reason,
                                };
                                return close(send, &conn, c).await;
                            }
                        };
                        match write_within(&mut send, &mut chunks, stall).await {
                            Ok(()) => {}
                            Err(Stop::Gone) => break,
                            Err(Stop::Stalled) => {
                                let reason = format!(
                                    "the client read nothing of the control stream for {} s",
                                    stall.as_secs()
                                );
                                tracing::info!(%reason, "closing QUIC connection");
                                let code = VarInt::from_u32(ztp_proto::Code::Stalled.value());
                                conn.close(code, reason.as_bytes());
                                return;
                            }
                        }
                        if let Some(q) = queued {
                            let _ = q.send(());
                        }
                    }
                    Out::Close(c) => return close(send, &conn, c).await,
                }
            }
            // Until the client has it all (at most CLOSE_GRACE): the daemon
            // may close the connection next, which drops what is unsent.
            if send.finish().is_ok() {
                let _ = tokio::time::timeout(CLOSE_GRACE, send.stopped()).await;
            }
        });
        (control, writer)
    }

    /// Queues `m` after the messages before it.
    pub(super) async fn send(&self, m: Message) {
        let _ = self.tx.send(Out::Message(Box::new(m), None)).await;
    }

    /// Queues `m` and returns once its bytes are in the stream's send
    /// buffer, ahead of anything a component stream queues after.
    pub(super) async fn send_queued(&self, m: Message) {
        let (done, queued) = oneshot::channel();
        if self
            .tx
            .send(Out::Message(Box::new(m), Some(done)))
            .await
            .is_ok()
        {
            let _ = queued.await;
        }
    }

    /// Closes the connection with `c`'s code: every request's streams are
    /// reset with `cancelled`, the close is announced on this stream, and
    /// the connection is closed once that is acknowledged (or after
    /// [`CLOSE_GRACE`]). Messages queued later are dropped.
    pub(super) async fn close(&self, c: Close) {
        tracing::info!(code = %c.code, reason = %c.reason, "closing QUIC connection");
        if let Ok(s) = self.session.lock() {
            for r in s.requests() {
                r.cancel(None, None);
            }
        }
        // A writer already gone (the client stopped the control stream),
        // or one so far behind that its queue is full (a client that
        // reads too little of it), cannot announce anything soon: close
        // at once rather than wait for it.
        let not_queued = match self.tx.try_send(Out::Close(c)) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(out) | mpsc::error::TrySendError::Closed(out)) => {
                out
            }
        };
        if let Out::Close(c) = not_queued {
            self.conn
                .close(VarInt::from_u32(c.code.value()), c.reason.as_bytes());
        }
    }
}

/// Why a write to the control stream stopped.
enum Stop {
    /// The stream or the connection is gone.
    Gone,
    /// The client accepted no byte for the stall timeout.
    Stalled,
}

/// Writes every chunk, failing once no byte was accepted for `stall`
/// (progress, however slow, restarts the wait).
async fn write_within(
    send: &mut SendStream,
    mut chunks: &mut [Bytes],
    stall: Duration,
) -> Result<(), Stop> {
    while !chunks.is_empty() {
        let written = match tokio::time::timeout(stall, send.write_chunks(chunks)).await {
            Ok(Ok(w)) => w,
            Ok(Err(_)) => return Err(Stop::Gone),
            Err(_) => return Err(Stop::Stalled),
        };
        chunks = &mut chunks[written.chunks..];
    }
    Ok(())
}

async fn close(mut send: SendStream, conn: &Connection, c: Close) {
    let said = Message::Error(ErrorMsg {
        id: None,
        code: c.code,
        message: c.reason.clone(),
        retry_after_ms: None,
    });
    if let Ok(bytes) = frame(&said) {
        let announced = async {
            send.write_all(&bytes).await.ok()?;
            send.finish().ok()?;
            send.stopped().await.ok()
        };
        let _ = tokio::time::timeout(CLOSE_GRACE, announced).await;
    }
    conn.close(VarInt::from_u32(c.code.value()), c.reason.as_bytes());
}
