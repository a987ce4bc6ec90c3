//! `zt verify`: structure and every digest, naming each failing component.

use std::io::Write;

use anyhow::Result;
use zt_format::{ComponentStatus, ZtFile};

use crate::exit::{Failure, INVALID, UNVERIFIABLE};

/// What `zt verify` demands beyond the structure.
#[derive(Debug, Clone, Copy, Default)]
pub struct Policy {
    /// An undigested component is an error (exit 3).
    pub require_digest: bool,
    /// An unknown digest algorithm is tolerated instead of exit 3.
    pub allow_unverified: bool,
}

/// Verifies every component and reports each one that fails.
pub fn run(out: &mut impl Write, file: &ZtFile, policy: Policy) -> Result<()> {
    let (mut failed, mut unverifiable, mut ok, mut undigested) = (0u64, 0u64, 0u64, 0u64);
    for w in file.warnings() {
        writeln!(out, "warning: {w}")?;
    }
    for r in file.verify() {
        match r.status {
            ComponentStatus::Verified(_) => ok += 1,
            ComponentStatus::NoDigest => {
                undigested += 1;
                if policy.require_digest {
                    writeln!(out, "UNVERIFIED {}/{}: no digest", r.object, r.component)?;
                }
            }
            ComponentStatus::Failed(e) => {
                failed += 1;
                writeln!(out, "FAILED {e}")?;
            }
            ComponentStatus::Unverifiable(e) => {
                unverifiable += 1;
                if !policy.allow_unverified {
                    writeln!(out, "UNVERIFIED {e}")?;
                }
            }
        }
    }
    writeln!(
        out,
        "{}: {ok} verified, {undigested} without digest, {unverifiable} unverifiable, {failed} failed",
        file.label()
    )?;
    if failed > 0 {
        return Err(Failure::new(
            INVALID,
            format!(
                "{}: {failed} component(s) failed verification",
                file.label()
            ),
        )
        .into());
    }
    if (unverifiable > 0 && !policy.allow_unverified) || (undigested > 0 && policy.require_digest) {
        return Err(Failure::new(
            UNVERIFIABLE,
            format!("{}: some components could not be verified", file.label()),
        )
        .into());
    }
    Ok(())
}
