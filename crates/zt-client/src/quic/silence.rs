//! A server that keeps its connection alive (it acknowledges the client's
//! keep-alives) but sends nothing would leave a waiting request hanging
//! forever: a deadlocked daemon, a hostile one. A request waiting on a
//! connection that receives no stream data for [`SILENCE`] fails instead,
//! as an HTTP fetch fails on a silent socket.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::Result;
use quinn::Connection;

use crate::Transport;

/// How long a waiting request gives a connection that receives no stream
/// data: twice the idle timeout, so that a server that is gone altogether
/// is reported as a lost connection first.
pub const SILENCE: Duration = Duration::from_millis(2 * super::IDLE_TIMEOUT_MS as u64);

/// How often a waiting request looks at its connection's counters.
const LOOK: Duration = Duration::from_millis(250);

/// A request's connection, watched for silence while the request waits.
#[derive(Debug, Clone)]
pub struct Watch {
    conn: Connection,
    /// The file asked for, to name in the error.
    path: String,
}

impl Watch {
    pub(crate) fn new(conn: Connection, path: &str) -> Self {
        Watch {
            conn,
            path: path.to_owned(),
        }
    }

    /// STREAM and RESET_STREAM frames received so far: these move while the
    /// server sends anything for any request (pings and acks do not count).
    fn progress(&self) -> u64 {
        let f = self.conn.stats().frame_rx;
        f.stream.saturating_add(f.reset_stream)
    }

    /// `fut`'s output, or a transport error naming the file and what was
    /// awaited once the connection has received no stream data for
    /// [`SILENCE`] meanwhile.
    pub(crate) async fn unless_silent<T>(
        &self,
        awaited: &str,
        fut: impl Future<Output = T>,
    ) -> Result<T> {
        tokio::pin!(fut);
        // Most waits are over at once (a component already in): no
        // counters, no timer.
        tokio::select! {
            biased;
            out = &mut fut => return Ok(out),
            () = std::future::ready(()) => {}
        }
        let mut seen = self.progress();
        let mut since = Instant::now();
        let mut look = tokio::time::interval_at(tokio::time::Instant::now() + LOOK, LOOK);
        loop {
            tokio::select! {
                out = &mut fut => return Ok(out),
                _ = look.tick() => {
                    let now = self.progress();
                    if now != seen {
                        (seen, since) = (now, Instant::now());
                    } else if since.elapsed() >= SILENCE {
                        return Err(Transport(format!(
                            "{}: the server sent no data for {} s while {awaited} was awaited",
                            self.path,
                            SILENCE.as_secs()
                        ))
                        .into());
                    }
                }
            }
        }
    }
}
