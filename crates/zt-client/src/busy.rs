//! Refusals that pass. A server with no turn for a request's work now (a
//! burst of first row requests from the ranks of a job starting together,
//! a full CPU queue, a file being rewritten) says how long to wait: HTTP
//! `503` or `429` with `Retry-After`, ztp/1 `retry_after_ms`. The request
//! is sent again after about that long, for at most
//! [`Options::busy_wait`](crate::Options::busy_wait) from the first
//! refusal, instead of failing. Each wait is the server's, or, when that
//! is less, a least wait that doubles with each refusal (250 ms to 2 s),
//! stretched by a random part of up to half again, so that the clients
//! refused together do not come back together.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};

/// Runs `attempt` (one sending of a request) until it ends in anything but
/// a passing refusal, or until waiting out the next refusal would pass
/// `patience`: then the last refusal, saying how long it was waited out.
pub(crate) async fn patiently<T, F, Fut>(patience: Duration, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut waits = Waits::new(patience);
    loop {
        match attempt().await {
            Err(e) => match waits.next(&e) {
                Some(wait) => tokio::time::sleep(wait).await,
                None => return Err(waits.gave_up(e)),
            },
            done => return done,
        }
    }
}

/// The waits between one request's sendings.
#[derive(Debug)]
pub(crate) struct Waits {
    patience: Duration,
    /// When the first passing refusal came: the patience counts from it,
    /// not from a first answer that was slow to come.
    first: Option<Instant>,
    /// Refusals waited out so far.
    waited: u32,
}

/// The least wait, and the wait that grows from it with each refusal
/// waited out (doubling, up to [`MOST`]) when the server asks for less:
/// a server that answers `Retry-After: 0` is not asked again at once,
/// over and over. The bound is low because a server that names its wait
/// knows its load best: ztserve asks for 1 s, and waits grown to 10 s
/// left its CPU idle while the clients it refused slept (a burst of 8
/// ranks took up to 22.8 s against 6.7 s).
const LEAST: Duration = Duration::from_millis(250);
const MOST: Duration = Duration::from_secs(2);

impl Waits {
    pub(crate) fn new(patience: Duration) -> Waits {
        Waits {
            patience,
            first: None,
            waited: 0,
        }
    }

    /// How long to wait before sending the request again after it failed
    /// with `e`: `None` when `e` is no passing refusal, or when the wait
    /// the server asked for would end past the patience. A longer wait of
    /// the client's own (grown, spread) is cut to the patience's end, so
    /// the last sending comes as the patience ends.
    pub(crate) fn next(&mut self, e: &Error) -> Option<Duration> {
        let asked = e.retry_after()?;
        let first = *self.first.get_or_insert_with(Instant::now);
        let left = self.patience.checked_sub(first.elapsed())?;
        if asked > left {
            return None;
        }
        let grown = LEAST.saturating_mul(1 << self.waited.min(16)).min(MOST);
        self.waited += 1;
        Some(spread(asked.max(grown)).min(left))
    }

    /// `e`, the error the request ends with; a passing refusal notes how
    /// often and how long it was waited out before (when it was).
    pub(crate) fn gave_up(&self, e: Error) -> Error {
        let Some(first) = self.first.filter(|_| e.retry_after().is_some()) else {
            return e;
        };
        if self.waited == 0 {
            return e;
        }
        let note = format!(
            " (refused {} times over {:.1} s, waiting at least as the server asked; the client's busy_wait is {} s)",
            self.waited + 1,
            first.elapsed().as_secs_f64(),
            self.patience.as_secs_f64()
        );
        e.noted(&note)
    }
}

/// `wait` stretched by a random part of up to half of it.
fn spread(wait: Duration) -> Duration {
    wait.saturating_add(wait.mul_f64(fastrand::f64() / 2.0))
}

/// A `Retry-After` header's wait: whole seconds, or an HTTP date (the
/// time until it; zero once it has passed). `None` when it is neither.
pub(crate) fn retry_after_header(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;

    fn busy(ms: u64) -> Error {
        Error::Server {
            status: Status::Http(503),
            message: "busy".into(),
            retry_after: Some(Duration::from_millis(ms)),
        }
    }

    #[test]
    fn each_wait_is_the_servers_and_up_to_half_again_within_the_patience() {
        let mut w = Waits::new(Duration::from_secs(10));
        for _ in 0..2 {
            let d = w.next(&busy(1000)).unwrap();
            assert!(d >= Duration::from_millis(1000), "{d:?}");
            assert!(d <= Duration::from_millis(1500), "{d:?}");
        }
        // Asked for less than the waits grown so far (250 ms doubled twice).
        let d = w.next(&busy(0)).unwrap();
        assert!(d >= Duration::from_millis(1000), "{d:?}");
        assert_eq!(w.next(&busy(20_000)), None, "past the patience");
        let gone = Error::Server {
            status: Status::Http(503),
            message: "down".into(),
            retry_after: None,
        };
        assert_eq!(w.next(&gone), None, "no wait asked for: not passing");
        assert_eq!(w.next(&Error::Transport("lost".into())), None);
        assert_eq!(
            w.gave_up(gone).to_string(),
            "down",
            "not a refusal waited out"
        );
        let last = w.gave_up(busy(1000)).to_string();
        assert!(last.contains("refused 4 times"), "{last}");
        let first = Waits::new(Duration::ZERO);
        assert_eq!(first.gave_up(busy(5)).to_string(), "busy", "never waited");
    }

    #[test]
    fn the_least_wait_grows_and_huge_waits_end_the_patience() {
        let mut w = Waits::new(Duration::from_secs(3600));
        let waits: Vec<Duration> = (0..8).map(|_| w.next(&busy(0)).unwrap()).collect();
        for (n, d) in waits.iter().enumerate() {
            let least = (Duration::from_millis(250) * (1 << n)).min(Duration::from_secs(2));
            assert!(*d >= least && *d <= least.mul_f64(1.5), "{n}: {d:?}");
        }
        let huge = retry_after_header("18446744073709551615").unwrap();
        let e = Error::Server {
            status: Status::Http(503),
            message: "later".into(),
            retry_after: Some(huge),
        };
        assert_eq!(w.next(&e), None, "a wait past the patience ends it");
        assert_eq!(spread(Duration::MAX), Duration::MAX, "saturates");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_is_sent_again_until_it_is_answered_or_patience_runs_out() {
        let mut sent = 0;
        let answered = patiently(Duration::from_secs(30), || {
            sent += 1;
            let refused = sent < 4;
            async move {
                if refused {
                    Err(busy(1000))
                } else {
                    Ok(sent)
                }
            }
        })
        .await;
        assert_eq!(answered.unwrap(), 4);

        let mut sent = 0;
        let e = patiently(Duration::from_secs(5), || {
            sent += 1;
            async { Err::<(), _>(busy(1000)) }
        })
        .await
        .unwrap_err();
        // Waits of 1-1.5 s, 1-1.5 s, 1-1.5 s, then what is left of the 5 s.
        assert!((4..=5).contains(&sent), "{sent} sendings in 5 s");
        assert!(e.is_transient() && e.retry_after().is_some(), "{e:?}");
        assert!(e.to_string().contains("busy_wait is 5 s"), "{e}");
    }

    #[test]
    fn retry_after_is_seconds_or_a_date() {
        assert_eq!(retry_after_header(" 3 "), Some(Duration::from_secs(3)));
        let soon = std::time::SystemTime::now() + Duration::from_secs(120);
        let d = retry_after_header(&httpdate::fmt_http_date(soon)).unwrap();
        assert!(d > Duration::from_secs(100) && d <= Duration::from_secs(120));
        let past = httpdate::fmt_http_date(std::time::UNIX_EPOCH);
        assert_eq!(retry_after_header(&past), Some(Duration::ZERO));
        assert_eq!(retry_after_header("soon"), None);
        assert_eq!(retry_after_header("-1"), None);
    }
}
