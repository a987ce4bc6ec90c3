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

/// Chooses the exit code for an error by looking through its causes.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if let Some(f) = cause.downcast_ref::<Failure>() {
            return f.code;
        }
        if let Some(r) = cause.downcast_ref::<zt_client::Refused>() {
            return match r.kind {
                zt_client::Refusal::Corrupt => INVALID,
                zt_client::Refusal::Unverifiable => UNVERIFIABLE,
            };
        }
        if cause.downcast_ref::<reqwest::Error>().is_some()
            || cause.downcast_ref::<zt_client::Transport>().is_some()
            || cause.downcast_ref::<quinn::ConnectionError>().is_some()
        {
            return IO;
        }
        if let Some(z) = cause.downcast_ref::<zt_format::Error>() {
            return match z {
                zt_format::Error::Invalid { rule, .. } if rule.is_unverifiable() => UNVERIFIABLE,
                zt_format::Error::Invalid { .. } => INVALID,
                _ => IO,
            };
        }
        if cause.downcast_ref::<std::io::Error>().is_some() {
            return IO;
        }
    }
    INVALID
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
    fn codes_follow_the_cause() {
        let t: anyhow::Result<()> = Err(zt_client::Transport("gone".into()).into());
        let e = t.context("object \"x\", component \"data\"").unwrap_err();
        assert_eq!(exit_code(&e), IO);
        let r: anyhow::Error = zt_client::Refused {
            kind: zt_client::Refusal::Corrupt,
            message: "bad".into(),
        }
        .into();
        assert_eq!(exit_code(&r), INVALID);
    }
}
