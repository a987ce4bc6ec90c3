//! A refused server certificate, put into words: what was wrong with it
//! and which option would trust it (`--ca FILE`, `--cert-fingerprint
//! SHA256`, `--insecure`; the Python package's `ca=`, `cert_fingerprint=`
//! and `insecure=`). rustls' own text is a debug dump at best
//! (`Other(OtherError(CaUsedAsEndEntity))`) and says nothing of a remedy.

use rustls::CertificateError;

/// Why a certificate was refused.
#[derive(Debug, Clone)]
pub(crate) enum Why {
    /// It is not the one pinned by its fingerprint.
    Fingerprint { want: [u8; 32] },
    /// Its chain failed against `roots` (where they came from).
    Chain { error: rustls::Error, roots: String },
}

impl Why {
    /// The error the handshake fails with (and whose alert the server gets).
    pub(super) fn tls_error(&self) -> rustls::Error {
        match self {
            Why::Fingerprint { .. } => CertificateError::ApplicationVerificationFailure.into(),
            Why::Chain { error, .. } => error.clone(),
        }
    }
}

/// One refusal: why, and of which certificate.
#[derive(Debug, Clone)]
pub(crate) struct Refused {
    pub(super) why: Why,
    /// SHA-256 of the certificate's DER, what `--cert-fingerprint` takes.
    pub(super) fingerprint: [u8; 32],
    /// The name the client checked it for.
    pub(super) server: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `secs` as a rough span: "3 days", "5 hours", "42 seconds".
fn span(secs: u64) -> String {
    let (n, unit) = match secs {
        s if s >= 2 * 86_400 => (s / 86_400, "days"),
        s if s >= 2 * 3_600 => (s / 3_600, "hours"),
        s if s >= 2 * 60 => (s / 60, "minutes"),
        s => (s, "seconds"),
    };
    format!("{n} {unit}")
}

impl Refused {
    /// What was wrong with the certificate, in the user's terms.
    fn what(&self) -> String {
        let (error, roots) = match &self.why {
            Why::Fingerprint { want } => {
                return format!("its SHA-256 fingerprint is not the pinned {}", hex(want))
            }
            Why::Chain { error, roots } => (error, roots),
        };
        let rustls::Error::InvalidCertificate(e) = error else {
            return format!("{error}");
        };
        match e {
            CertificateError::UnknownIssuer => {
                format!("it is not signed by any CA in {roots} (unknown issuer)")
            }
            CertificateError::Expired => "it has expired".to_owned(),
            CertificateError::ExpiredContext { time, not_after } => format!(
                "it expired {} ago (check this machine's clock if that is wrong)",
                span(time.as_secs().saturating_sub(not_after.as_secs()))
            ),
            CertificateError::NotValidYet => "it is not valid yet".to_owned(),
            CertificateError::NotValidYetContext { time, not_before } => format!(
                "it is not valid for another {} (check this machine's clock)",
                span(not_before.as_secs().saturating_sub(time.as_secs()))
            ),
            CertificateError::NotValidForName => {
                format!(
                    "it is not valid for the name {:?} (name mismatch)",
                    self.server
                )
            }
            CertificateError::NotValidForNameContext { presented, .. } => format!(
                "it is not valid for the name {:?} (name mismatch: it names {})",
                self.server,
                if presented.is_empty() {
                    "nothing in its subjectAltName".to_owned()
                } else {
                    presented.join(", ")
                }
            ),
            CertificateError::Revoked => "it has been revoked".to_owned(),
            CertificateError::BadEncoding => "it is not a well-formed certificate".to_owned(),
            CertificateError::BadSignature => {
                "it is not correctly signed by its issuer (bad signature)".to_owned()
            }
            CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
                "its extended key usage does not allow a TLS server".to_owned()
            }
            CertificateError::UnhandledCriticalExtension => {
                "it carries a critical extension this client does not understand".to_owned()
            }
            CertificateError::Other(other) => {
                // webpki's reasons that rustls has no variant for arrive
                // boxed, named only by their Debug spelling.
                let name = other.to_string();
                match name.as_str() {
                    "CaUsedAsEndEntity" => format!(
                        "it is a CA certificate (basicConstraints CA:TRUE, which `openssl req -x509` sets by default) used as the server's own (CA used as end entity), and it is not itself listed in {roots}"
                    ),
                    "EndEntityUsedAsCa" => {
                        "its chain uses a server's certificate as a CA (end entity used as CA)"
                            .to_owned()
                    }
                    _ => format!("{name} (against {roots})"),
                }
            }
            other => format!("{}", rustls::Error::InvalidCertificate(other.clone())),
        }
    }

    /// What to pass instead.
    fn remedy(&self) -> String {
        let fp = hex(&self.fingerprint);
        let name = matches!(
            &self.why,
            Why::Chain {
                error: rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                        | CertificateError::NotValidForNameContext { .. }
                ),
                ..
            }
        );
        let mut options = Vec::new();
        if name {
            options.push(
                "connect by a name it carries (--resolve NAME:PORT:ADDR keeps the name and picks the address)"
                    .to_owned(),
            );
        }
        options
            .push("--ca FILE with the CA that issued it, or with this very certificate".to_owned());
        options.push(format!(
            "--cert-fingerprint {fp} to pin exactly this certificate, once you have checked that it is the server's (ztserve logs its fingerprint at startup)"
        ));
        options.push("--insecure to accept any certificate (trusted networks only)".to_owned());
        format!("to trust it, pass {}", options.join("; or "))
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server's certificate for {:?} (SHA-256 {}) is not trusted: {}; {}",
            self.server,
            hex(&self.fingerprint),
            self.what(),
            self.remedy()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::UnixTime;

    fn refused(why: Why) -> String {
        Refused {
            why,
            fingerprint: [0xab; 32],
            server: "127.0.0.1".into(),
        }
        .to_string()
    }

    fn chain(e: CertificateError) -> Why {
        Why::Chain {
            error: e.into(),
            roots: "the CA file /tmp/ca.pem".into(),
        }
    }

    #[test]
    fn each_refusal_names_the_problem_and_the_remedy() {
        let m = refused(chain(CertificateError::UnknownIssuer));
        assert!(
            m.contains("unknown issuer") && m.contains("/tmp/ca.pem"),
            "{m}"
        );
        assert!(
            m.contains(&format!("--cert-fingerprint {}", "ab".repeat(32))),
            "{m}"
        );
        assert!(m.contains("--ca FILE") && m.contains("--insecure"), "{m}");
        let ca = rustls::OtherError(std::sync::Arc::new(Named("CaUsedAsEndEntity")));
        let m = refused(chain(CertificateError::Other(ca)));
        assert!(
            m.contains("CA used as end entity") && m.contains("CA:TRUE"),
            "{m}"
        );
        let m = refused(chain(CertificateError::ExpiredContext {
            time: UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_000_000)),
            not_after: UnixTime::since_unix_epoch(std::time::Duration::from_secs(
                1_000_000 - 3 * 86_400,
            )),
        }));
        assert!(m.contains("expired 3 days ago"), "{m}");
        let m = refused(chain(CertificateError::NotValidForName));
        assert!(
            m.contains("name mismatch") && m.contains("--resolve"),
            "{m}"
        );
        let m = refused(Why::Fingerprint { want: [1; 32] });
        assert!(m.contains("not the pinned 0101"), "{m}");
    }

    /// An error whose Display is a name, as webpki's are.
    #[derive(Debug)]
    struct Named(&'static str);

    impl std::fmt::Display for Named {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Named {}
}
