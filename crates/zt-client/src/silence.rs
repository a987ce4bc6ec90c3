//! A server that keeps its connection alive (it acknowledges the client's
//! keep-alives) but sends nothing would leave a waiting request hanging
//! forever: a deadlocked daemon, a hostile one. A request waiting on a
//! connection that receives no stream data for the silence timeout
//! (`Options::silence_timeout`) fails instead, as an HTTP fetch fails on a
//! silent socket.

use std::future::Future;
use std::time::{Duration, Instant};

use quinn::Connection;

use crate::error::{Error, Result};

/// How often a waiting request looks at its connection's counters, at most.
const LOOK: Duration = Duration::from_millis(250);

/// A request's connection, watched for silence while the request waits.
#[derive(Debug, Clone)]
pub(crate) struct Watch {
    conn: Connection,
    /// The file asked for, to name in the error.
    path: String,
    /// How long the connection may receive no stream data.
    silence: Duration,
}

impl Watch {
    pub(crate) fn new(conn: Connection, path: &str, silence: Duration) -> Self {
        Watch {
            conn,
            path: path.to_owned(),
            silence,
        }
    }

    /// STREAM and RESET_STREAM frames received so far: these move while the
    /// server sends anything for any request (pings and acks do not count).
    fn progress(&self) -> u64 {
        let f = self.conn.stats().frame_rx;
        f.stream.saturating_add(f.reset_stream)
    }

    /// `fut`'s output, or a transport error naming the file and what was
    /// awaited once the connection has received no stream data for the
    /// silence timeout meanwhile.
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
        let every = LOOK.min(self.silence / 4).max(Duration::from_millis(1));
        let mut look = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                out = &mut fut => return Ok(out),
                _ = look.tick() => {
                    let now = self.progress();
                    if now != seen {
                        (seen, since) = (now, Instant::now());
                    } else if since.elapsed() >= self.silence {
                        return Err(Error::Transport(format!(
                            "{}: the server sent no data for {} while {awaited} was awaited",
                            self.path,
                            span(self.silence)
                        )));
                    }
                }
            }
        }
    }
}

/// `20 s`, or `1500 ms` when not whole seconds.
fn span(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}
