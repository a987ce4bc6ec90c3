//! The TLS sessions the daemon keeps so that a returning client resumes
//! one instead of making a full handshake (kept by the daemon: rustls'
//! memory store). Each TLS configuration, the ztp/1 listener's and
//! HTTPS's, has a store of its own holding at most [`SESSIONS`] sessions
//! (the oldest forgotten first, so clients that never return cannot grow
//! it; each connection leaves two TLS 1.3 tickets). A TLS 1.3 session is
//! taken out of the store when it is resumed: a ticket resumes one
//! connection, and a replayed ticket finds nothing. A TLS 1.2 client
//! (HTTPS only; ztp/1 is TLS 1.3) resumes by session ID, which rustls
//! keeps for reuse until it is forgotten. Sessions found to be resumed
//! are counted by transport in `ztserve_tls_resumed_total`.

use std::sync::Arc;

use prometheus::{IntCounter, IntCounterVec, Registry};
use rustls::server::{ServerSessionMemoryCache, StoresServerSessions};

use crate::server::families::{counter_vec, register};

/// Sessions each store keeps: two for each of 2,048 connections (a few
/// hundred bytes each, about a megabyte in all; rustls' own default,
/// 256, covered 128 connections where clients may open eight at once).
pub(crate) const SESSIONS: usize = 4096;

/// The count of resumed sessions, and the stores that count into it.
#[derive(Debug, Clone)]
pub(crate) struct Resumptions {
    resumed: IntCounterVec,
}

impl Default for Resumptions {
    fn default() -> Self {
        let resumed = counter_vec(
            "ztserve_tls_resumed_total",
            "TLS sessions clients asked to resume and the daemon found in its store (a TLS 1.3 ticket, taken once, or a TLS 1.2 session ID), by transport.",
            &["transport"],
        );
        for transport in ["quic", "https"] {
            resumed.with_label_values(&[transport]);
        }
        Resumptions { resumed }
    }
}

impl Resumptions {
    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        register(registry, &[&self.resumed])
    }

    /// A new store for one TLS configuration of `transport` (`quic` or
    /// `https`).
    pub(crate) fn store(&self, transport: &str) -> Arc<dyn StoresServerSessions> {
        Arc::new(Counted {
            kept: ServerSessionMemoryCache::new(SESSIONS),
            resumed: self.resumed.with_label_values(&[transport]),
        })
    }
}

/// rustls' store, counting the sessions found in it to be resumed.
#[derive(Debug)]
struct Counted {
    kept: Arc<ServerSessionMemoryCache>,
    resumed: IntCounter,
}

impl StoresServerSessions for Counted {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.kept.put(key, value)
    }

    /// A TLS 1.2 resumption by session ID (TLS 1.3 takes).
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let found = self.kept.get(key);
        if found.is_some() {
            self.resumed.inc();
        }
        found
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let found = self.kept.take(key);
        if found.is_some() {
            self.resumed.inc();
        }
        found
    }

    fn can_cache(&self) -> bool {
        self.kept.can_cache()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_resumed_once_and_the_store_is_bounded() {
        let r = Resumptions::default();
        let store = r.store("quic");
        for i in 0..SESSIONS + 10 {
            assert!(store.put(i.to_be_bytes().to_vec(), vec![1]));
        }
        // The oldest were forgotten, the newest kept.
        assert_eq!(store.take(&0usize.to_be_bytes()), None);
        let last = (SESSIONS + 9).to_be_bytes();
        assert_eq!(store.take(&last), Some(vec![1]));
        assert_eq!(store.take(&last), None, "a session resumes once");
        assert_eq!(r.resumed.with_label_values(&["quic"]).get(), 1);
        // A TLS 1.2 session ID is looked up, and stays.
        store.put(b"id".to_vec(), vec![2]);
        assert_eq!(store.get(b"id"), Some(vec![2]));
        assert_eq!(store.get(b"id"), Some(vec![2]));
        assert_eq!(store.get(b"unknown"), None);
        assert_eq!(r.resumed.with_label_values(&["quic"]).get(), 3);
        assert_eq!(r.resumed.with_label_values(&["https"]).get(), 0);
    }
}
