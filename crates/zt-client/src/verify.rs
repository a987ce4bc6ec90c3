//! Checking a received component against its digest, and what a consumer
//! is handed once it passed.

use std::borrow::Cow;

use zt_format::{AlignedBuf, DType, Digest, DigestValue, Encoding, Hasher, LogicalType};

use crate::error::{At, Error, Result};

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
    pub dtype: DType,
    /// The logical type, when it differs from `dtype`.
    pub logical_type: Option<LogicalType>,
    pub encoding: Encoding,
    pub uncompressed_length: Option<u64>,
    /// The digest the bytes were checked against.
    pub digest: Option<Digest>,
    /// The stored bytes (compressed for zstd), 64-byte aligned.
    pub data: AlignedBuf,
    pub verification: Verification,
}

impl Delivered {
    /// The object and component.
    pub fn at(&self) -> At {
        At {
            object: self.object.clone(),
            component: self.component.clone(),
        }
    }

    /// The decoded bytes, 64-byte aligned: the data itself for raw
    /// components, decompressed into a buffer of `uncompressed_length` bytes
    /// (refused before allocating past `cap`) for zstd.
    pub fn decoded(&self, cap: u64) -> Result<Cow<'_, AlignedBuf>> {
        let at = self.at();
        match self.encoding {
            Encoding::Raw => Ok(Cow::Borrowed(&self.data)),
            Encoding::Zstd => {
                let n = self
                    .uncompressed_length
                    .ok_or_else(|| Error::corrupt(&at, "zstd without uncompressed_length"))?;
                zt_format::codec::decompress(self.data.as_slice(), n, cap)
                    .map(Cow::Owned)
                    .map_err(|rule| Error::corrupt(&at, format!("{}: {rule}", rule.name())))
            }
            other => Err(Error::corrupt(
                &at,
                format!("encoding {:?} cannot be decoded here", other.name()),
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
    /// A check of one component's bytes against `digest`; refused before
    /// a byte is read when the algorithm is unknown (unless
    /// `allow_unknown`) or there is no digest while `require` holds.
    pub(crate) fn new(
        digest: Option<&Digest>,
        allow_unknown: bool,
        require: bool,
        at: &At,
    ) -> Result<Self> {
        if digest.is_none() && require {
            return Err(Error::Unverifiable {
                at: Some(at.clone()),
                message: format!(
                    "{at}: carries no digest, so its bytes cannot be verified, and a digest is required (--require-digest)"
                ),
            });
        }
        if let Some(DigestValue::Unknown { algorithm }) = digest.map(Digest::value) {
            if !allow_unknown {
                return Err(Error::Unverifiable {
                    at: Some(at.clone()),
                    message: format!("{at}: digest algorithm {algorithm:?} is unknown, so the data cannot be verified (--allow-unverified accepts it)"),
                });
            }
        }
        Ok(Check {
            expected: digest.cloned(),
            hasher: digest.and_then(Digest::algorithm).map(Hasher::new),
        })
    }

    pub(crate) fn update(&mut self, b: &[u8]) {
        if let Some(h) = &mut self.hasher {
            h.update(b);
        }
    }

    pub(crate) fn finish(self, at: &At) -> Result<Verification> {
        match (self.expected, self.hasher) {
            (Some(e), Some(h)) => {
                e.compare(&h.finish()).map_err(|r| Error::corrupt(at, r))?;
                Ok(Verification::Verified)
            }
            (Some(_), None) => Ok(Verification::UnknownAlgorithm),
            (None, _) => Ok(Verification::Unverified),
        }
    }
}
