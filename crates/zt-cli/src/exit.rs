//! Exit codes shared by every `zt` subcommand.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | ok |
//! | 1 | invalid or corrupt input |
//! | 2 | usage or configuration |
//! | 3 | cannot verify: an unknown digest algorithm, or `--require-digest` with an undigested component |
//! | 4 | I/O or network |

use std::fmt;

/// Invalid or corrupt input.
pub const INVALID: u8 = 1;
/// Usage or configuration error.
pub const USAGE: u8 = 2;
/// The data could not be verified.
pub const UNVERIFIABLE: u8 = 3;
/// I/O or network failure.
pub const IO: u8 = 4;

/// The exit code table, as printed in `--help`.
pub const HELP: &str = "Exit codes: 0 ok; 1 invalid or corrupt input; 2 usage or configuration; \
3 cannot verify (unknown digest algorithm, or --require-digest with an undigested component); \
4 I/O or network.";

/// An error that carries its own exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// Chooses the exit code for an error by looking through its causes: the
/// first of them that is one of ours decides.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if let Some(f) = cause.downcast_ref::<Failure>() {
            return f.code;
        }
        if let Some(c) = cause.downcast_ref::<zt_client::Error>() {
            return client_code(c);
        }
        if let Some(z) = cause.downcast_ref::<zt_format::Error>() {
            return format_code(z);
        }
        if cause.downcast_ref::<std::io::Error>().is_some() {
            return IO;
        }
    }
    INVALID
}

/// The exit code for each way a client call fails.
fn client_code(e: &zt_client::Error) -> u8 {
    use zt_client::Error;
    match e {
        Error::Usage(_) => USAGE,
        Error::Unverifiable { .. } => UNVERIFIABLE,
        Error::Corrupt { .. } => INVALID,
        // Run again: it starts over on the new version.
        Error::Changed { .. } => IO,
        Error::Format(z) => format_code(z),
        // An untrusted certificate is a network failure, as it was before
        // it had a kind of its own; its message names the option to pass.
        Error::Transport(_) | Error::Tls(_) | Error::Protocol(_) | Error::Io { .. } => IO,
        // A server shutting down or busy: try again. A refusal: the request.
        e @ Error::Server { .. } if e.is_transient() => IO,
        Error::Server { .. } => INVALID,
        _ => INVALID,
    }
}

fn format_code(z: &zt_format::Error) -> u8 {
    match z {
        zt_format::Error::Invalid { rule, .. } if rule.is_unverifiable() => UNVERIFIABLE,
        zt_format::Error::Invalid { .. } => INVALID,
        _ => IO,
    }
}

/// The error and its causes on one line, each cause said once: an error
/// whose own text already ends with its cause's (`creating X: Is a
/// directory`) is not followed by that cause again.
pub fn report(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out == text || out.ends_with(&format!(": {text}")) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Whether the error is a closed pipe, which exits quietly.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
            || matches!(c.downcast_ref::<zt_format::Error>(),
                Some(zt_format::Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::from_raw_os_error(21);
        let e: anyhow::Error = zt_client::Error::Io {
            context: "creating out.part".into(),
            source: io,
        }
        .into();
        assert_eq!(
            report(&e),
            "creating out.part: Is a directory (os error 21)"
        );
        let e = e.context("fetching m.safetensors");
        assert_eq!(
            report(&e),
            "fetching m.safetensors: creating out.part: Is a directory (os error 21)"
        );
    }

    #[test]
    fn codes_follow_the_cause() {
        let t: anyhow::Result<()> = Err(zt_client::Error::Transport("gone".into()).into());
        let e = t.context("object \"x\", component \"data\"").unwrap_err();
        assert_eq!(exit_code(&e), IO);
        let corrupt = zt_client::Error::Corrupt {
            at: None,
            message: "bad".into(),
        };
        assert_eq!(exit_code(&corrupt.into()), INVALID);
        let unverifiable = zt_client::Error::Unverifiable {
            at: None,
            message: "no digest".into(),
        };
        assert_eq!(exit_code(&unverifiable.into()), UNVERIFIABLE);
        assert_eq!(
            exit_code(&zt_client::Error::Usage("bad URL".into()).into()),
            USAGE
        );
        let busy = zt_client::Error::Server {
            status: zt_client::Status::Ztp(ztp_proto::Code::ShuttingDown),
            message: "bye".into(),
            retry_after: None,
        };
        assert_eq!(exit_code(&busy.into()), IO);
        let busy = zt_client::Error::Server {
            status: zt_client::Status::Ztp(ztp_proto::Code::Unavailable),
            message: "no turn".into(),
            retry_after: Some(std::time::Duration::from_secs(1)),
        };
        assert_eq!(exit_code(&busy.into()), IO);
        let missing = zt_client::Error::Server {
            status: zt_client::Status::Http(404),
            message: "no file".into(),
            retry_after: None,
        };
        assert_eq!(exit_code(&missing.into()), INVALID);
        let changed = zt_client::Error::Changed {
            url: "http://h/m.zt".into(),
            detail: "during the fetch".into(),
        };
        assert_eq!(exit_code(&changed.into()), IO, "a rerun starts over");
        let untrusted = zt_client::Error::Tls("unknown issuer".into());
        assert_eq!(exit_code(&untrusted.into()), IO);
    }
}
