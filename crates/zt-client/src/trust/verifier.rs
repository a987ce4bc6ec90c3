//! The certificate check behind every trust policy. It keeps what it
//! refused (why, and which certificate) in [`Refusals`], because neither
//! transport hands the reason back intact: quinn reports a failed
//! handshake as text, reqwest as "error sending request".

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use sha2::{Digest as _, Sha256};

use super::refused::{Refused, Why};
use super::watch::Refusals;

/// What a server certificate must pass.
#[derive(Debug)]
pub(super) enum Check {
    /// A chain to one of `roots` (webpki: names, dates, usages), unless
    /// the certificate is one of `listed`, trusted as it is.
    Roots {
        /// `None` when there is no root at all: every chain is refused.
        webpki: Option<Arc<WebPkiServerVerifier>>,
        listed: Vec<CertificateDer<'static>>,
        /// Where the roots came from, for the error.
        label: String,
    },
    /// Exactly the certificate with this SHA-256 fingerprint.
    Fingerprint([u8; 32]),
    /// Anything (`--insecure`).
    Any,
}

impl Check {
    pub(super) fn roots(
        roots: Arc<rustls::RootCertStore>,
        listed: Vec<CertificateDer<'static>>,
        provider: &Arc<CryptoProvider>,
        label: &str,
    ) -> Check {
        // Building fails only without roots, which the check then reports
        // as an unknown issuer for whatever the server presents.
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, Arc::clone(provider))
            .build()
            .ok();
        Check::Roots {
            webpki,
            listed,
            label: label.to_owned(),
        }
    }
}

/// A [`Check`] as rustls calls it. Handshake signatures are verified
/// under every policy, so a pinned (or listed) certificate proves the
/// server holds its key.
#[derive(Debug)]
pub(super) struct Verifier {
    check: Check,
    provider: Arc<CryptoProvider>,
    refusals: Refusals,
}

impl Verifier {
    pub(super) fn new(check: Check, provider: Arc<CryptoProvider>, refusals: Refusals) -> Self {
        Verifier {
            check,
            provider,
            refusals,
        }
    }

    fn verdict(
        &self,
        end_entity: &CertificateDer<'_>,
        fingerprint: &[u8; 32],
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<(), Why> {
        match &self.check {
            Check::Any => Ok(()),
            Check::Fingerprint(want) if want == fingerprint => Ok(()),
            Check::Fingerprint(want) => Err(Why::Fingerprint { want: *want }),
            // Byte for byte one the user listed: trusted as curl's
            // --cacert trusts it, whatever its basic constraints say.
            Check::Roots { listed, .. }
                if listed.iter().any(|c| c.as_ref() == end_entity.as_ref()) =>
            {
                Ok(())
            }
            Check::Roots {
                webpki: None,
                label,
                ..
            } => Err(Why::Chain {
                error: CertificateError::UnknownIssuer.into(),
                roots: label.clone(),
            }),
            Check::Roots {
                webpki: Some(w),
                label,
                ..
            } => w
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
                .map(|_| ())
                .map_err(|error| Why::Chain {
                    error,
                    roots: label.clone(),
                }),
        }
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let fingerprint: [u8; 32] = Sha256::digest(end_entity.as_ref()).into();
        let verdict = self.verdict(
            end_entity,
            &fingerprint,
            intermediates,
            server_name,
            ocsp,
            now,
        );
        match verdict {
            Ok(()) => Ok(ServerCertVerified::assertion()),
            Err(why) => {
                let error = why.tls_error();
                self.refusals.record(Refused {
                    why,
                    fingerprint,
                    server: server_name.to_str().into_owned(),
                });
                Err(error)
            }
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
