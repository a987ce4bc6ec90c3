//! Checking a received component against its digest.

use anyhow::Result;
use zt_format::{AlignedBuf, Digest, DigestValue, Hasher};

/// Why a component was refused, for exit codes and callers that react.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The bytes do not match their digest, or are malformed.
    Corrupt,
    /// The bytes cannot be verified (unknown algorithm, or no digest when one is required).
    Unverifiable,
}

/// A component refused by verification; the message names the object and component.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Refused {
    pub kind: Refusal,
    pub message: String,
}

fn refused(kind: Refusal, message: String) -> anyhow::Error {
    Refused { kind, message }.into()
}

/// The network failed: the server went away, a stream broke, a request
/// failed. Fetches interrupted this way can be resumed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Transport(pub String);

/// How a delivered component was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// Its digest matched.
    Verified,
    /// It carried no digest.
    Unverified,
    /// Its digest algorithm is unknown and the caller allowed it.
    UnknownAlgorithm,
}

/// A received component, verified before delivery.
#[derive(Debug)]
pub struct Delivered {
    pub object: String,
    pub component: String,
    /// Position in the server's send order.
    pub seq: u64,
    pub dtype: String,
    pub logical_type: Option<String>,
    pub encoding: String,
    pub uncompressed_length: Option<u64>,
    pub digest: Option<String>,
    /// The stored bytes (compressed for zstd), 64-byte aligned.
    pub data: AlignedBuf,
    pub verification: Verification,
}

impl Delivered {
    /// The decoded bytes, 64-byte aligned: the data itself for raw
    /// components, decompressed into a buffer of `uncompressed_length` bytes
    /// (refused before allocating past `cap`) for zstd.
    pub fn decoded(&self, cap: u64) -> Result<std::borrow::Cow<'_, AlignedBuf>> {
        let label = format!("object {:?}, component {:?}", self.object, self.component);
        match self.encoding.as_str() {
            "raw" => Ok(std::borrow::Cow::Borrowed(&self.data)),
            "zstd" => {
                let n = self.uncompressed_length.ok_or_else(|| {
                    refused(
                        Refusal::Corrupt,
                        format!("{label}: zstd without uncompressed_length"),
                    )
                })?;
                if n > cap {
                    return Err(refused(
                        Refusal::Corrupt,
                        format!("{label}: decodes to {n} bytes, over the cap of {cap}"),
                    ));
                }
                let mut out = AlignedBuf::zeroed(n)
                    .map_err(|r| refused(Refusal::Corrupt, format!("{label}: {r}")))?;
                let written = zstd::bulk::Decompressor::new()
                    .and_then(|mut d| {
                        d.decompress_to_buffer(self.data.as_slice(), out.as_mut_slice())
                    })
                    .map_err(|e| refused(Refusal::Corrupt, format!("{label}: zstd: {e}")))?;
                if written as u64 != n {
                    return Err(refused(
                        Refusal::Corrupt,
                        format!("{label}: zstd data decodes to {written} bytes, expected {n}"),
                    ));
                }
                Ok(std::borrow::Cow::Owned(out))
            }
            other => Err(refused(
                Refusal::Corrupt,
                format!("{label}: unknown encoding {other:?}"),
            )),
        }
    }
}

/// An incremental digest check.
#[derive(Debug)]
pub(crate) struct Check {
    expected: Option<Digest>,
    hasher: Option<Hasher>,
}

impl Check {
    pub(crate) fn new(digest: Option<&str>, allow_unknown: bool, label: &str) -> Result<Self> {
        let expected = match digest {
            Some(d) => Some(
                Digest::parse(d).map_err(|r| refused(Refusal::Corrupt, format!("{label}: {r}")))?,
            ),
            None => None,
        };
        if let Some(DigestValue::Unknown { algorithm }) = expected.as_ref().map(Digest::value) {
            if !allow_unknown {
                return Err(refused(
                    Refusal::Unverifiable,
                    format!("{label}: digest algorithm {algorithm:?} is unknown, so the data cannot be verified (--allow-unverified accepts it)"),
                ));
            }
        }
        let hasher = expected
            .as_ref()
            .and_then(Digest::algorithm)
            .map(Hasher::new);
        Ok(Check { expected, hasher })
    }

    pub(crate) fn update(&mut self, b: &[u8]) {
        if let Some(h) = &mut self.hasher {
            h.update(b);
        }
    }

    pub(crate) fn finish(self, label: &str) -> Result<Verification> {
        match (self.expected, self.hasher) {
            (Some(e), Some(h)) => {
                e.compare(&h.finish())
                    .map_err(|r| refused(Refusal::Corrupt, format!("{label}: {r}")))?;
                Ok(Verification::Verified)
            }
            (Some(_), None) => Ok(Verification::UnknownAlgorithm),
            (None, _) => Ok(Verification::Unverified),
        }
    }
}
