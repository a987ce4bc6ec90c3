//! The QUIC certificate: the configured one (`tls.cert`/`tls.key`), or a
//! self-signed one generated once with rcgen and kept in the state
//! directory, so its fingerprint survives restarts. Replicas behind one
//! address should share one certificate (for example from a Kubernetes
//! Secret through `--tls-cert`/`--tls-key`) so that pinning works.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest as _, Sha256};

/// The cryptography of the daemon's TLS servers (ztp/1 over QUIC and
/// HTTPS): aws-lc-rs, whose AES-128-GCM sealed QUIC's 6,500-byte packets
/// at 1.9x ring's rate on the development machine (`cargo bench
/// --features bench-crypto --bench crypto`; docs/benchmarks.md). aws-lc
/// seeds its random generator from CPU jitter on its first use in a
/// process (about 30 ms; each thread's own generator is then seeded from
/// it in microseconds): the first call here does that, so it falls on the
/// daemon's start rather than on its first client's handshake. Clients
/// use their own ([`zt_client::trust::provider`]); each side of a
/// connection seals with its own implementation of the same cipher suite.
/// Its suites are listed in the clients' order, AES-128-GCM first
/// ([`zt_client::trust::prefer_aes_128`]); as TLS servers do by default,
/// it takes the first suite a client offers that it has.
pub fn provider() -> Arc<CryptoProvider> {
    static SEEDED: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    Arc::clone(SEEDED.get_or_init(|| {
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        zt_client::trust::prefer_aes_128(&mut provider);
        if let Err(e) = provider.secure_random.fill(&mut [0; 32]) {
            // The handshakes will fail too, each with rustls's error.
            tracing::warn!("the TLS random generator failed at the start: {e:?}");
        }
        Arc::new(provider)
    }))
}

/// A certificate chain and its key.
#[derive(Debug)]
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Identity {
    /// SHA-256 of the leaf certificate's DER, as lowercase hex.
    pub fn fingerprint(&self) -> String {
        let leaf = self.chain.first().map(|c| c.as_ref()).unwrap_or_default();
        crate::server::catalog::etag::hex(&Sha256::digest(leaf))
    }
}

pub(crate) fn load(cert: &Path, key: &Path) -> Result<Identity> {
    let chain = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading certificate {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing certificate {}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading key {}", key.display()))?;
    anyhow::ensure!(!chain.is_empty(), "{} holds no certificate", cert.display());
    Ok(Identity { chain, key })
}

/// The configured identity, or the generated one under `state_dir`.
pub fn identity(configured: Option<(&Path, &Path)>, state_dir: &Path) -> Result<Identity> {
    if let Some((c, k)) = configured {
        return load(c, k);
    }
    let cert = state_dir.join("quic-cert.pem");
    let key = state_dir.join("quic-key.pem");
    if cert.exists() && key.exists() {
        return load(&cert, &key);
    }
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("creating state directory {}", state_dir.display()))?;
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "ztserve".to_owned());
    let generated = rcgen::generate_simple_self_signed(vec![
        "localhost".into(),
        "127.0.0.1".into(),
        "::1".into(),
        host,
    ])
    .context("generating a self-signed certificate")?;
    write_private(&key, generated.signing_key.serialize_pem().as_bytes())?;
    std::fs::write(&cert, generated.cert.pem())
        .with_context(|| format!("writing {}", cert.display()))?;
    tracing::info!(cert = %cert.display(), "generated a self-signed QUIC certificate");
    load(&cert, &key)
}

fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(data)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// That the first call seeds aws-lc's generator is measured
    /// (docs/benchmarks.md), not tested: only a timing would show it.
    #[test]
    fn the_provider_is_made_once() {
        assert!(Arc::ptr_eq(&provider(), &provider()));
        let mut a = [0; 32];
        let mut b = [0; 32];
        provider().secure_random.fill(&mut a).unwrap();
        provider().secure_random.fill(&mut b).unwrap();
        assert_ne!(a, b);
    }

    /// The suite the daemon's TLS configuration picks for `client`'s
    /// first flight (rustls on both ends, in memory; the suite is chosen
    /// before any certificate is checked).
    fn picked_for(client: rustls::ClientConfig) -> rustls::CipherSuite {
        let dir = tempfile::tempdir().unwrap();
        let id = identity(None, dir.path()).unwrap();
        let server = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(id.chain, id.key)
            .unwrap();
        let name = "localhost".try_into().unwrap();
        let mut c = rustls::ClientConnection::new(Arc::new(client), name).unwrap();
        let mut s = rustls::ServerConnection::new(Arc::new(server)).unwrap();
        let mut hello = Vec::new();
        c.write_tls(&mut hello).unwrap();
        s.read_tls(&mut hello.as_slice()).unwrap();
        s.process_new_packets().unwrap();
        s.negotiated_cipher_suite().unwrap().suite()
    }

    /// Our client and the daemon agree on AES-128-GCM (both providers
    /// list AES-256-GCM first by default); a client preferring
    /// AES-256-GCM still gets it.
    #[test]
    fn our_ends_agree_on_aes_128_gcm_and_others_get_their_choice() {
        zt_client::trust::install_provider();
        let ours =
            zt_client::trust::client_config(&zt_client::trust::Trust::Insecure, b"ztp/1").unwrap();
        assert_eq!(
            picked_for(ours),
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
        );
        let theirs = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        assert_eq!(
            picked_for(theirs),
            rustls::CipherSuite::TLS13_AES_256_GCM_SHA384
        );
    }
}
