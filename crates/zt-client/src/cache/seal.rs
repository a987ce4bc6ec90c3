//! An entry's seal: the crc32c of its bytes, taken when it was stored
//! from bytes that had just been checked against its digest, and kept
//! with it in the extended attribute `user.ztserve.seal` (as
//! `<digest> crc32c:0x<crc>`: the seal names the digest it vouches for).
//!
//! A read checks the seal instead of hashing the entry again with its
//! (cryptographic, slower) digest: a hardware checksum still catches
//! what happens to a file at rest (a bit flipped, a truncation, a partial
//! or foreign write, an entry renamed to another digest). The seal is
//! trusted only on an entry that is this user's alone ([`private`]): one
//! that another user wrote or could write, or that has another name, is
//! hashed with its digest on every read, as is one without a seal (a
//! filesystem without user extended attributes; it is sealed once such a
//! read passed). `zt cache verify` always hashes with the digest.

use std::fs::{File, Metadata};

use zt_format::{Digest, DigestAlgorithm};

/// The extended attribute holding an entry's seal.
const NAME: &str = "user.ztserve.seal";

/// Seals `file`, the entry (or the file about to become the entry) for
/// `digest`, as holding `bytes`, which were just checked against `digest`.
/// A filesystem that keeps no extended attributes leaves it unsealed (its
/// reads hash with the digest): not an error.
pub(super) fn put(file: &File, digest: &Digest, bytes: &[u8]) {
    if digest.algorithm() == Some(DigestAlgorithm::Crc32c) {
        return; // Checked with its own crc32c already.
    }
    let seal = format!("{digest} {}", DigestAlgorithm::Crc32c.digest(bytes));
    let flags = rustix::fs::XattrFlags::empty();
    if let Err(e) = rustix::fs::fsetxattr(file, NAME, seal.as_bytes(), flags) {
        tracing::debug!(error = %e, "cache entry not sealed");
    }
}

/// What a read of an entry is checked against.
pub(super) struct Check {
    pub(super) digest: Digest,
    /// Whether that is the entry's seal (else the digest it is named by).
    pub(super) sealed: bool,
}

/// What a read of the entry `file` for `digest` checks its bytes against:
/// its seal's crc32c where the entry is this user's alone and sealed for
/// `digest`, else `digest` itself.
pub(super) fn check_for(file: &File, meta: &Metadata, digest: &Digest) -> Check {
    let mut value = [0u8; 160];
    let sealed = private(meta)
        .then(|| rustix::fs::fgetxattr(file, NAME, &mut value[..]).ok())
        .flatten()
        .and_then(|len| std::str::from_utf8(value.get(..len)?).ok())
        .and_then(|text| {
            let (named, crc) = text.split_once(' ')?;
            let crc = Digest::parse(crc).ok()?;
            // The digest's value, whatever its spelling (hex case).
            let vouches = Digest::parse(named).ok()?.value() == digest.value();
            (vouches && crc.algorithm() == Some(DigestAlgorithm::Crc32c)).then_some(crc)
        });
    match sealed {
        Some(crc) => Check {
            digest: crc,
            sealed: true,
        },
        None => Check {
            digest: digest.clone(),
            sealed: false,
        },
    }
}

/// Whether an entry is this user's alone: owned by them, written by no one
/// else, and no other name for it.
pub(super) fn private(m: &Metadata) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    m.uid() == rustix::process::geteuid().as_raw() && m.mode() & 0o022 == 0 && m.nlink() == 1
}
