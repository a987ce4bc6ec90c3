//! What each certificate check refused lately, and each connection's
//! watch on it. A check serves every connection made under its trust
//! policy (so that they can resume each other's sessions: `kept`), so a
//! failed connection looks for refusals of its own server's certificate
//! since it began, for the error it reports.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use super::refused::Refused;

/// Refusals each check keeps, the latest.
const KEPT: usize = 16;

/// What one certificate check refused lately, numbered; each connection
/// watches it from its start ([`Watch`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Refusals(Arc<Mutex<Log>>);

#[derive(Debug, Default)]
struct Log {
    next: u64,
    recent: VecDeque<(u64, Refused)>,
}

impl Refusals {
    pub(super) fn record(&self, r: Refused) {
        let mut log = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let n = log.next;
        log.next += 1;
        if log.recent.len() == KEPT {
            log.recent.pop_front();
        }
        log.recent.push_back((n, r));
    }

    /// Watches for refusals of `server`'s certificate from now on.
    pub(super) fn watch(&self, server: &str) -> Watch {
        let since = self.0.lock().unwrap_or_else(PoisonError::into_inner).next;
        Watch {
            refusals: self.clone(),
            since,
            server: bare(server),
        }
    }
}

/// A host as a certificate is checked for it: an IPv6 address without
/// the brackets a URL puts around it, and every address in one spelling
/// (a URL writes `[::ffff:7f00:1]` where rustls names `::ffff:127.0.0.1`).
fn bare(host: &str) -> String {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.parse::<std::net::IpAddr>()
        .map_or_else(|_| host.to_owned(), |ip| ip.to_string())
}

/// One connection's (or one HTTP source's) view of its check's
/// [`Refusals`]: those of its server's certificate since it began, for
/// the error its failed handshake reports.
#[derive(Debug, Clone)]
pub(crate) struct Watch {
    refusals: Refusals,
    since: u64,
    server: String,
}

impl Watch {
    /// The last refusal of this server's certificate since the watch
    /// began, if any.
    pub(crate) fn last(&self) -> Option<Refused> {
        let log = self
            .refusals
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        log.recent
            .iter()
            .rev()
            .take_while(|(n, _)| *n >= self.since)
            .find(|(_, r)| bare(&r.server).eq_ignore_ascii_case(&self.server))
            .map(|(_, r)| r.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::refused::Why;

    #[test]
    fn a_watch_sees_its_own_servers_refusals_since_it_began() {
        let refusal = |server: &str| Refused {
            why: Why::Fingerprint { want: [0; 32] },
            fingerprint: [1; 32],
            server: server.into(),
        };
        let refusals = Refusals::default();
        refusals.record(refusal("::1"));
        let watch = refusals.watch("[::1]");
        let mapped = refusals.watch("[::ffff:7f00:1]");
        let other = refusals.watch("example.com");
        assert!(watch.last().is_none(), "a refusal from before the watch");
        refusals.record(refusal("::1"));
        assert_eq!(watch.last().map(|r| r.server), Some("::1".to_owned()));
        assert!(other.last().is_none(), "another server's refusal");
        refusals.record(refusal("::ffff:127.0.0.1"));
        assert!(mapped.last().is_some(), "one address, two spellings");
        // Only the latest are kept: a watch whose refusal was pushed out
        // by others' sees none.
        for _ in 0..KEPT {
            refusals.record(refusal("example.org"));
        }
        assert!(watch.last().is_none());
        assert_eq!(refusals.0.lock().unwrap().recent.len(), KEPT);
    }
}
