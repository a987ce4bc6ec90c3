//! What each trust policy keeps for the process's life, so that its
//! connections resume TLS sessions instead of making a full handshake
//! each time (the server's certificate sent and checked again, and on a
//! long chain an extra round trip). rustls resumes a session only under
//! the very certificate check that accepted it, since a resumed session
//! skips the check: so every configuration made under one policy and
//! one ALPN protocol is a copy of one kept configuration, sharing its
//! check, the check's refusals and one session store. A policy is the
//! trust and what it rests on: a CA file by its path and the SHA-256 of
//! the certificates in it (a file replaced by other certificates is a
//! new policy, under which no session made under the old one resumes), a
//! fingerprint by itself.
//!
//! Bounded: each store keeps the sessions of [`SERVERS`] servers (the
//! oldest forgotten first), and at most [`POLICIES`] configurations (a
//! policy and a protocol: ztp/1 and HTTPS each have their own) are kept
//! at once (one more, and all are forgotten: their connections then make
//! full handshakes once more). A forked child keeps its own
//! (`per_process`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rustls::client::{ClientSessionMemoryCache, Resumption};
use sha2::{Digest as _, Sha256};

use rustls::pki_types::CertificateDer;

use super::watch::Refusals;
use crate::per_process::PerProcess;

/// Servers whose sessions one configuration's store keeps.
pub(super) const SERVERS: usize = 64;
/// Configurations (policy and protocol) kept at once.
pub(super) const POLICIES: usize = 16;

/// A trust policy, as far as resuming under it goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Policy {
    System,
    /// A CA file's path (its errors name it) and the SHA-256 of its
    /// certificates.
    Ca(PathBuf, [u8; 32]),
    Fingerprint([u8; 32]),
    Insecure,
}

impl Policy {
    /// The policy of the CA file at `path`, holding `listed`.
    pub(super) fn ca(path: &Path, listed: &[CertificateDer<'_>]) -> Policy {
        let mut h = Sha256::new();
        for c in listed {
            h.update((c.len() as u64).to_be_bytes());
            h.update(c.as_ref());
        }
        Policy::Ca(path.to_owned(), h.finalize().into())
    }
}

/// One policy's configuration, and what its check refused.
#[derive(Debug)]
pub(super) struct Kept {
    pub(super) config: rustls::ClientConfig,
    pub(super) refusals: Refusals,
}

/// Kept configurations by policy and ALPN protocol.
#[derive(Debug, Default)]
struct Map(HashMap<(Policy, Vec<u8>), Arc<Kept>>);

impl Map {
    /// The configuration kept for `policy` and `alpn`, made by `make`
    /// when there is none (all forgotten first when [`POLICIES`] are).
    fn keep(
        &mut self,
        policy: Policy,
        alpn: &[u8],
        make: impl FnOnce(Refusals, Resumption) -> crate::error::Result<rustls::ClientConfig>,
    ) -> crate::error::Result<Arc<Kept>> {
        let key = (policy, alpn.to_vec());
        if let Some(k) = self.0.get(&key) {
            return Ok(Arc::clone(k));
        }
        let k = Arc::new(fresh(make)?);
        if self.0.len() >= POLICIES {
            self.0.clear();
        }
        self.0.insert(key, Arc::clone(&k));
        Ok(k)
    }
}

/// This process's kept configurations (a forked child makes its own).
static CONFIGS: PerProcess<Mutex<Map>> = PerProcess::new();

/// The configuration kept for `policy` and `alpn`, made by `make` (from
/// the refusals its check records into, and the sessions it resumes
/// from) when there is none.
pub(super) fn kept(
    policy: Policy,
    alpn: &[u8],
    make: impl FnOnce(Refusals, Resumption) -> crate::error::Result<rustls::ClientConfig>,
) -> crate::error::Result<Arc<Kept>> {
    let configs = CONFIGS.get(Mutex::default);
    let mut map = configs.value.lock().unwrap_or_else(PoisonError::into_inner);
    map.keep(policy, alpn, make)
}

/// A configuration kept by nothing: its sessions resume only among the
/// connections made with copies of it.
pub(super) fn fresh(
    make: impl FnOnce(Refusals, Resumption) -> crate::error::Result<rustls::ClientConfig>,
) -> crate::error::Result<Kept> {
    let refusals = Refusals::default();
    let sessions = Arc::new(ClientSessionMemoryCache::new(SERVERS));
    let config = make(refusals.clone(), Resumption::store(sessions))?;
    Ok(Kept { config, refusals })
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn config(
        made: &Cell<usize>,
    ) -> impl FnOnce(Refusals, Resumption) -> crate::error::Result<rustls::ClientConfig> + '_ {
        move |_, resumption| {
            made.set(made.get() + 1);
            let mut c = crate::trust::client_config(&crate::trust::Trust::Insecure, b"t")?;
            c.resumption = resumption;
            Ok(c)
        }
    }

    #[test]
    fn one_configuration_per_policy_and_protocol_and_a_bounded_number() {
        let made = Cell::new(0);
        let mut map = Map::default();
        let a = map
            .keep(Policy::Fingerprint([1; 32]), b"ztp/1", config(&made))
            .unwrap();
        let again = map
            .keep(Policy::Fingerprint([1; 32]), b"ztp/1", config(&made))
            .unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        assert_eq!(made.get(), 1);
        // Another fingerprint, CA file or protocol: a configuration of its own.
        let ca =
            |der: &[u8]| Policy::ca(Path::new("ca.pem"), &[CertificateDer::from(der.to_vec())]);
        for (policy, alpn) in [
            (Policy::Fingerprint([2; 32]), &b"ztp/1"[..]),
            (Policy::Fingerprint([1; 32]), b"http/1.1"),
            (ca(b"one"), b"ztp/1"),
            (ca(b"two"), b"ztp/1"),
        ] {
            let k = map.keep(policy, alpn, config(&made)).unwrap();
            assert!(!Arc::ptr_eq(&a, &k));
        }
        assert_eq!(made.get(), 5);
        assert_eq!(ca(b"one"), ca(b"one"));
        let elsewhere = Policy::ca(Path::new("b.pem"), &[CertificateDer::from(b"one".to_vec())]);
        assert_ne!(ca(b"one"), elsewhere);
        // One past the bound forgets them all.
        for i in 0..POLICIES as u8 {
            map.keep(Policy::Fingerprint([100 + i; 32]), b"ztp/1", config(&made))
                .unwrap();
            assert!(map.0.len() <= POLICIES);
        }
        let after = map
            .keep(Policy::Fingerprint([1; 32]), b"ztp/1", config(&made))
            .unwrap();
        assert!(!Arc::ptr_eq(&a, &after), "kept past the bound");
    }
}
