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

/// A request's connections (several for a fetch spread over them),
/// watched together for silence while the request waits.
#[derive(Debug, Clone)]
pub(crate) struct Watch {
    conns: Vec<Connection>,
    /// The file asked for, to name in the error.
    path: String,
    /// How long the connection may receive no stream data.
    silence: Duration,
}

impl Watch {
    pub(crate) fn new(conn: Connection, path: &str, silence: Duration) -> Self {
        Watch {
            conns: vec![conn],
            path: path.to_owned(),
            silence,
        }
    }

    /// Watches `conn` too: the request is silent only while every one of
    /// its connections is.
    pub(crate) fn and(mut self, conn: Connection) -> Self {
        self.conns.push(conn);
        self
    }

    /// STREAM and RESET_STREAM frames received so far on the connections:
    /// these move while the server sends anything for any request (pings
    /// and acks do not count).
    fn progress(&self) -> u64 {
        self.conns.iter().fold(0u64, |sum, c| {
            let f = c.stats().frame_rx;
            sum.saturating_add(f.stream).saturating_add(f.reset_stream)
        })
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
