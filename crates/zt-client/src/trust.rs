//! How a client trusts the server's certificate: the system roots (the
//! default), a CA file, a pinned SHA-256 fingerprint, or nothing at all.

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest as _, Sha256};

/// The trust policy.
#[derive(Debug, Clone)]
pub enum Trust {
    /// The operating system's root certificates.
    System,
    /// Certificates in a PEM file.
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

/// Installs ring as the process's rustls provider. With more than one
/// provider compiled in (a program that also links another TLS stack),
/// building a TLS configuration otherwise panics.
pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Accepts one pinned certificate, or any (insecure); signatures are still checked.
#[derive(Debug)]
struct Pinned {
    want: Option<[u8; 32]>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.want {
            None => Ok(ServerCertVerified::assertion()),
            Some(want) if Sha256::digest(end_entity.as_ref()).as_slice() == want => {
                Ok(ServerCertVerified::assertion())
            }
            Some(_) => Err(rustls::Error::General(
                "server certificate does not match the pinned fingerprint".into(),
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(m, c, d, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(m, c, d, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A TLS 1.3 client configuration for `alpn` under this policy.
pub fn client_config(trust: &Trust, alpn: &[u8]) -> Result<rustls::ClientConfig> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| Error::Usage(format!("TLS 1.3 with ring: {e}")))?;
    let mut config = match trust {
        Trust::System | Trust::Ca(_) => {
            let mut roots = rustls::RootCertStore::empty();
            if let Trust::Ca(path) = trust {
                let bad = |e: &dyn std::fmt::Display| {
                    Error::Usage(format!("CA file {}: {e}", path.display()))
                };
                for c in CertificateDer::pem_file_iter(path).map_err(|e| bad(&e))? {
                    roots.add(c.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
                }
            } else {
                let found = rustls_native_certs::load_native_certs();
                for c in found.certs {
                    let _ = roots.add(c);
                }
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::Fingerprint(f) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Pinned {
                want: Some(*f),
                provider: provider(),
            }))
            .with_no_client_auth(),
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Pinned {
                want: None,
                provider: provider(),
            }))
            .with_no_client_auth(),
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
}
