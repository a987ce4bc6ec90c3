//! Checking a received component against its digest, and what a consumer
//! is handed once it passed.

use std::borrow::Cow;

use zt_format::{
    AlignedBuf, Component, DType, Digest, DigestValue, Encoding, Hasher, LogicalType, Manifest,
};

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

/// Refuses `d` unless it is what the request's `manifest` announced: a
/// component it lists, of its length, types and encoding, checked against
/// its digest (the same one, or none in either), and not one delivered
/// before (`again`). A transport's per-component header could otherwise
/// choose what its bytes are checked against (a digest dropped or
/// changed) and how many bytes land at the manifest's offset.
pub(crate) fn as_announced(
    d: &Delivered,
    manifest: &Manifest,
    again: bool,
    source: &str,
) -> Result<()> {
    let at = d.at();
    let differs = |what: &str, got: &dyn std::fmt::Debug, want: &dyn std::fmt::Debug| {
        Error::Protocol(format!(
            "{source}: {at}: the component arrived with {what} {got:?} where the manifest says {want:?} (a component must be as its manifest announced it)"
        ))
    };
    let Some(c) = manifest.component(&d.object, &d.component) else {
        return Err(Error::Protocol(format!(
            "{source}: {at}: arrived but is not in the request's manifest"
        )));
    };
    if again {
        return Err(Error::Protocol(format!("{source}: {at}: arrived twice")));
    }
    let length = u64::try_from(d.data.len()).unwrap_or(u64::MAX);
    if length != c.length {
        return Err(differs("length", &length, &c.length));
    }
    if d.dtype != c.dtype || d.logical_type != c.logical_type {
        return Err(differs(
            "type",
            &(d.dtype, &d.logical_type),
            &(c.dtype, &c.logical_type),
        ));
    }
    if d.encoding != c.encoding || d.uncompressed_length != c.uncompressed_length {
        let got = (d.encoding, d.uncompressed_length);
        return Err(differs(
            "encoding",
            &got,
            &(c.encoding, c.uncompressed_length),
        ));
    }
    if !same_digest(d.digest.as_ref(), c) {
        let text = |g: Option<&Digest>| g.map(|g| g.to_string());
        return Err(differs(
            "digest",
            &text(d.digest.as_ref()),
            &text(c.digest.as_ref()),
        ));
    }
    Ok(())
}

/// Whether `got` is `c`'s digest: the same value (or, for an algorithm
/// not known here, the same text), or none in either.
fn same_digest(got: Option<&Digest>, c: &Component) -> bool {
    match (got, c.digest.as_ref()) {
        (None, None) => true,
        (Some(g), Some(w)) => match (g.value(), w.value()) {
            (DigestValue::Unknown { .. }, _) | (_, DigestValue::Unknown { .. }) => {
                g.as_str() == w.as_str()
            }
            (a, b) => a == b,
        },
        _ => false,
    }
}
