//! What a failed HTTP request says. reqwest's own message is only "error
//! sending request for url (...)": the reason (a refused certificate, a
//! refused connection, a reset) lies in its chain of sources, which its
//! `Display` leaves out, so every message here walks the chain.

use std::error::Error as StdError;

use crate::error::Error;
use crate::trust::Watch;

/// `e`'s message followed by each of its causes' (`a: b: c`), a cause
/// whose words are already there left out.
pub(crate) fn chain(e: &dyn StdError) -> String {
    let mut why = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !why.contains(&text) {
            why = format!("{why}: {text}");
        }
        cause = c.source();
    }
    why
}

/// The rustls error somewhere in `e`'s chain: as a cause of its own, or
/// inside an `io::Error` (how tokio-rustls hands it on, and reqwest may
/// wrap that in another; `io::Error`'s `source()` skips the error it
/// wraps, so each is opened with `get_ref`).
fn tls_error<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    if let Some(t) = e.downcast_ref::<rustls::Error>() {
        return Some(t);
    }
    let wrapped = e
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
        .and_then(|inner| tls_error(inner));
    wrapped.or_else(|| e.source().and_then(tls_error))
}

/// The error for a request (`what`: `GET URL (RANGE)`) that failed
/// before a response: the refused certificate in words, when that is why,
/// else a transport error with every cause.
pub(crate) fn request_failed(what: &str, e: &reqwest::Error, watch: &Watch) -> Error {
    let refused = matches!(tls_error(e), Some(rustls::Error::InvalidCertificate(_)));
    match watch.last() {
        Some(r) if refused => Error::Tls(format!("{what}: {r}")),
        _ => Error::Transport(format!("{what}: {}", chain(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_kept_and_tls_errors_found_inside_io_errors() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls.clone());
        assert_eq!(tls_error(&io), Some(&tls));
        assert_eq!(chain(&io), tls.to_string());
        let nested = std::io::Error::other(io);
        assert_eq!(tls_error(&nested), Some(&tls));
        let plain = std::io::Error::other("connection refused");
        assert_eq!(tls_error(&plain), None);
    }
}
