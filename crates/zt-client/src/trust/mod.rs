//! How a client trusts the server's certificate: the system roots (the
//! default), a CA file, a pinned SHA-256 fingerprint, or nothing at all;
//! and, when it does not, an error that says what was wrong with the
//! certificate and which option would trust it.
//!
//! - `verifier`: the one certificate check behind every policy, which
//!   remembers what it refused;
//! - `refused`: a refusal put into words, with the remedy;
//! - `watch`: what a check refused lately, and each connection's watch
//!   on it;
//! - `kept`: each policy's configuration, kept for the process's life so
//!   that its connections resume TLS sessions.

mod kept;
mod refused;
mod verifier;
mod watch;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::error::{Error, Result};
use crate::per_process::PerProcess;
use kept::{Kept, Policy};
use verifier::{Check, Verifier};
use watch::Refusals;
pub(crate) use watch::Watch;

/// The trust policy.
#[derive(Debug, Clone)]
pub enum Trust {
    /// The operating system's root certificates.
    System,
    /// Certificates in a PEM file: CAs whose chains are checked as usual,
    /// and any server certificate that is itself in the file (byte for
    /// byte), trusted as pinned (its name and dates not checked, as with
    /// [`Trust::Fingerprint`]; the handshake still proves the server holds
    /// its key). A self-signed
    /// certificate made with `openssl req -x509` is marked `CA:TRUE` by
    /// Debian's default configuration, which a chain check refuses as a
    /// server's own certificate.
    Ca(PathBuf),
    /// Exactly the certificate with this SHA-256 fingerprint (of its DER).
    Fingerprint([u8; 32]),
    /// Any certificate: for tests and trusted networks only.
    Insecure,
}

impl Trust {
    /// Parses a fingerprint given as hex, with or without `:` separators.
    pub fn fingerprint(s: &str) -> Result<Trust> {
        let hex: String = s.chars().filter(|c| *c != ':').collect();
        let mut out = [0u8; 32];
        if hex.len() != 64 {
            return Err(Error::Usage(format!(
                "a SHA-256 fingerprint has 64 hex digits, got {}",
                hex.len()
            )));
        }
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(hex.get(i * 2..i * 2 + 2).unwrap_or(""), 16)
                .map_err(|_| Error::Usage(format!("fingerprint {s:?} is not hex")))?;
        }
        Ok(Trust::Fingerprint(out))
    }
}

/// Installs [`provider`] as the process's rustls provider. With more than
/// one provider compiled in (a program that also links another TLS
/// stack), building a TLS configuration otherwise panics.
pub fn install_provider() {
    let _ = Arc::unwrap_or_clone(provider()).install_default();
}

/// The cryptography of the client's TLS configurations (ztp/1's packet
/// protection and HTTPS): ring, offering AES-128-GCM first
/// ([`prefer_aes_128`]). aws-lc-rs seals packets faster (the daemon uses
/// it), but seeds its random generator from CPU jitter at a process's
/// first handshake, about 30 ms that a short command such as
/// `zt info quic://` waits for, and the client's opening of packets was
/// no faster with it (docs/benchmarks.md, twenty-seventh session).
pub fn provider() -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    prefer_aes_128(&mut provider);
    Arc::new(provider)
}

/// Puts TLS 1.3's AES-128-GCM suite first among `provider`'s cipher
/// suites, the others keeping their order. Both providers list
/// AES-256-GCM first; a server takes the first suite its client offers,
/// so a connection between two of ours would use it, and it opens and
/// seals packets 10-25 % slower than AES-128-GCM here (four more AES
/// rounds a block; `cargo bench --features bench-crypto --bench crypto`).
/// AES-128-GCM is the suite every QUIC stack must implement (it protects
/// QUIC's first packets) and the one browsers offer first.
pub fn prefer_aes_128(provider: &mut CryptoProvider) {
    provider
        .cipher_suites
        .sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
}

/// A TLS 1.3 client configuration for `alpn` under this policy: a copy
/// of the one this process keeps for it, sharing its certificate check
/// and its store of sessions to resume (`kept`).
pub fn client_config(trust: &Trust, alpn: &[u8]) -> Result<rustls::ClientConfig> {
    Ok(watched_config(trust, alpn, "")?.0)
}

/// [`client_config`] for connections to `server` (a host name or
/// address), and a watch on what its certificate check refuses, for the
/// error a failed connection reports. Configurations under one policy
/// share their check and a store of sessions (`kept`): a connection
/// resumes a session an earlier one under the same policy made with the
/// same server.
pub(crate) fn watched_config(
    trust: &Trust,
    alpn: &[u8],
    server: &str,
) -> Result<(rustls::ClientConfig, Watch)> {
    let provider = provider();
    // The check is built only when a configuration is made: a kept one
    // is reused as it is.
    let kept = match trust {
        Trust::System => {
            let roots = system_roots();
            let empty = roots.is_empty();
            let label = "the system's root certificates";
            let check = || Check::roots(roots, Vec::new(), &provider, label);
            if empty {
                // Nothing kept: a later client looks for the roots again.
                Arc::new(kept::fresh(made(check, &provider, alpn))?)
            } else {
                kept::kept(Policy::System, alpn, made(check, &provider, alpn))?
            }
        }
        Trust::Ca(path) => {
            let (roots, listed) = read_ca_file(path)?;
            let label = format!("the CA file {}", path.display());
            let policy = Policy::ca(path, &listed);
            kept::kept(
                policy,
                alpn,
                made(
                    || Check::roots(Arc::new(roots), listed, &provider, &label),
                    &provider,
                    alpn,
                ),
            )?
        }
        Trust::Fingerprint(f) => kept::kept(
            Policy::Fingerprint(*f),
            alpn,
            made(|| Check::Fingerprint(*f), &provider, alpn),
        )?,
        Trust::Insecure => {
            kept::kept(Policy::Insecure, alpn, made(|| Check::Any, &provider, alpn))?
        }
    };
    let Kept { config, refusals } = &*kept;
    Ok((config.clone(), refusals.watch(server)))
}

/// Makes a configuration (from the refusals its check records into and
/// the sessions it resumes from) whose certificate check `check` builds
/// then, not before.
fn made<'a>(
    check: impl FnOnce() -> Check + 'a,
    provider: &Arc<CryptoProvider>,
    alpn: &'a [u8],
) -> impl FnOnce(Refusals, Resumption) -> Result<rustls::ClientConfig> + 'a {
    let provider = Arc::clone(provider);
    move |refusals, resumption| configure(check(), provider, alpn, refusals, resumption)
}

/// A configuration checking certificates with `check`, recording its
/// refusals into `refusals`, and resuming sessions from `resumption`.
fn configure(
    check: Check,
    provider: Arc<CryptoProvider>,
    alpn: &[u8],
    refusals: Refusals,
    resumption: Resumption,
) -> Result<rustls::ClientConfig> {
    let verifier = Verifier::new(check, Arc::clone(&provider), refusals);
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| Error::Usage(format!("TLS 1.3 with ring: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    config.resumption = resumption;
    Ok(config)
}

/// The operating system's root certificates, read once per process as
/// TLS clients usually do (with `SSL_CERT_FILE` and `SSL_CERT_DIR` as
/// they are then): every connection and HTTPS client made under
/// [`Trust::System`] read and parsed them again, a few milliseconds each
/// (docs/benchmarks.md, twenty-eighth session). A read that finds none
/// is not kept, so a later client reads them again. A CA file, by
/// contrast, is read for each client: it is the operator's, and may be
/// replaced.
fn system_roots() -> Arc<rustls::RootCertStore> {
    static ROOTS: PerProcess<Mutex<Option<Arc<rustls::RootCertStore>>>> = PerProcess::new();
    let roots = ROOTS.get(Mutex::default);
    // Held while reading, so that clients made at once read them once.
    let mut kept = roots.value.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(roots) = kept.as_ref() {
        return Arc::clone(roots);
    }
    #[cfg(test)]
    tests::SYSTEM_READS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(c);
    }
    let roots = Arc::new(roots);
    if !roots.is_empty() {
        *kept = Some(Arc::clone(&roots));
    }
    roots
}

/// The CA file's certificates: as trust anchors, and as they are (the
/// server certificates it pins).
fn read_ca_file(
    path: &std::path::Path,
) -> Result<(rustls::RootCertStore, Vec<CertificateDer<'static>>)> {
    let bad = |e: &dyn std::fmt::Display| Error::Usage(format!("CA file {}: {e}", path.display()));
    let mut roots = rustls::RootCertStore::empty();
    let mut listed = Vec::new();
    for c in CertificateDer::pem_file_iter(path).map_err(|e| bad(&e))? {
        let c = c.map_err(|e| bad(&e))?;
        roots.add(c.clone()).map_err(|e| bad(&e))?;
        listed.push(c);
    }
    if listed.is_empty() {
        return Err(bad(
            &"holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok((roots, listed))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Reads of the system's roots in this test process.
    pub(super) static SYSTEM_READS: AtomicUsize = AtomicUsize::new(0);

    #[test]
    fn the_system_roots_are_read_once_per_process() {
        install_provider();
        for _ in 0..3 {
            client_config(&Trust::System, b"ztp/1").unwrap();
        }
        let reads = SYSTEM_READS.load(Ordering::SeqCst);
        if system_roots().is_empty() {
            // A machine without a bundle: each client looks again.
            assert!(reads >= 3, "{reads} reads");
        } else {
            assert_eq!(reads, 1);
            assert!(Arc::ptr_eq(&system_roots(), &system_roots()));
        }
    }
}
