//! Sending one request's components: one unidirectional stream each, at
//! most `quic.max_streams` open at a time per connection, earlier ones
//! with higher send priority.

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use quinn::{Connection, SendStream, VarInt};
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio::task::JoinSet;
use ztp_proto::{frame_header, Code, ComponentHeader, Done, Message};

use crate::server::catalog::Served;
use crate::server::State;

/// Bytes read per `pread` while streaming a component.
const CHUNK: u64 = 1 << 20;

/// Cancellation state of one request.
#[derive(Debug, Default)]
pub(super) struct RequestCtl {
    all: AtomicBool,
    parts: Mutex<Vec<(String, Option<String>)>>,
    notify: Notify,
}

impl RequestCtl {
    pub(super) fn cancel(&self, object: Option<String>, component: Option<String>) {
        match object {
            None => self.all.store(true, Ordering::SeqCst),
            Some(o) => {
                if let Ok(mut p) = self.parts.lock() {
                    p.push((o, component));
                }
            }
        }
        self.notify.notify_waiters();
    }

    fn is_cancelled(&self, object: &str, component: &str) -> bool {
        self.all.load(Ordering::SeqCst)
            || self.parts.lock().is_ok_and(|p| {
                p.iter()
                    .any(|(o, c)| o == object && c.as_deref().is_none_or(|c| c == component))
            })
    }
}

/// One component to send.
#[derive(Debug, Clone)]
pub(super) struct Item {
    pub(super) header: ComponentHeader,
}

fn code(c: Code) -> VarInt {
    VarInt::from_u32(c.value())
}

/// Sends every item, then `done` on the control stream.
#[allow(clippy::too_many_arguments)]
pub(super) async fn run(
    state: Arc<State>,
    conn: Connection,
    served: Arc<Served>,
    id: u64,
    items: Vec<Item>,
    ctl: Arc<RequestCtl>,
    control: mpsc::Sender<Message>,
    slots: Arc<Semaphore>,
) {
    let (mut sent, mut cancelled) = (0u64, 0u64);
    let mut tasks = JoinSet::new();
    let n = items.len();
    for item in items {
        let h = &item.header;
        if ctl.is_cancelled(&h.object, &h.component) {
            cancelled += 1;
            continue;
        }
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            break;
        };
        let mut stream = match conn.open_uni().await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "connection lost while opening streams");
                return;
            }
        };
        // Earlier in the order, higher priority: layer 0 finishes first.
        let priority = i32::try_from(n.saturating_sub(usize::try_from(h.seq).unwrap_or(0)))
            .unwrap_or(i32::MAX);
        let _ = stream.set_priority(priority);
        let (state, served, ctl) = (Arc::clone(&state), Arc::clone(&served), Arc::clone(&ctl));
        tasks.spawn(async move {
            let ok = send_one(&state, &served, &ctl, &mut stream, &item.header).await;
            drop(permit);
            ok
        });
        // Reap finished streams as we go, so counts stay current.
        while let Some(r) = tasks.try_join_next() {
            if r.unwrap_or(false) {
                sent += 1
            } else {
                cancelled += 1
            }
        }
    }
    while let Some(r) = tasks.join_next().await {
        if r.unwrap_or(false) {
            sent += 1
        } else {
            cancelled += 1
        }
    }
    let _ = control
        .send(Message::Done(Done {
            id,
            sent,
            cancelled,
        }))
        .await;
}

/// Sends one component; true when it was delivered whole.
async fn send_one(
    state: &State,
    served: &Arc<Served>,
    ctl: &RequestCtl,
    stream: &mut SendStream,
    h: &ComponentHeader,
) -> bool {
    let Ok(head) = frame_header(h) else {
        return false;
    };
    if stream.write_all(&head).await.is_err() {
        return false;
    }
    let mut pos = h.offset;
    let end = h.offset.saturating_add(h.length);
    while pos < end {
        if ctl.is_cancelled(&h.object, &h.component) {
            let _ = stream.reset(code(Code::Cancelled));
            return false;
        }
        let n = CHUNK.min(end - pos);
        let s = Arc::clone(served);
        let read = tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; usize::try_from(n).unwrap_or(0)];
            s.file.read_exact_at(&mut buf, pos).map(|()| buf)
        })
        .await;
        let buf = match read {
            Ok(Ok(b)) => b,
            _ => {
                tracing::warn!(file = %served.path, object = %h.object, component = %h.component, "read failed mid-stream (file changed?)");
                let _ = stream.reset(code(Code::ReadFailed));
                return false;
            }
        };
        tokio::select! {
            r = stream.write_all(&buf) => {
                if r.is_err() {
                    // STOP_SENDING from the client, or the connection is gone.
                    return false;
                }
            }
            _ = ctl.notify.notified() => {
                if ctl.is_cancelled(&h.object, &h.component) {
                    let _ = stream.reset(code(Code::Cancelled));
                    return false;
                }
                if stream.write_all(&buf).await.is_err() {
                    return false;
                }
            }
        }
        state.metrics.add_bytes(n);
        state.metrics.add_quic_bytes(n);
        pos += n;
    }
    stream.finish().is_ok() && matches!(stream.stopped().await, Ok(None))
}
