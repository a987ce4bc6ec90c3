//! Every kind of served file behind one interface: a [`Probe`] says which
//! byte ranges of a file it needs, is handed them, and produces the same
//! validated [`Parsed`] manifest whatever the source (`.zt`, safetensors,
//! ...). It does no I/O: the server reads the ranges with `pread`, the
//! HTTP client with Range requests, an object store with ranged GETs, and
//! each sees the same number of reads (the source's read plan).
//!
//! A new source is one more module here and one more arm in [`Probe`].
//! Sources: `.zt` ([`crate::container`]), safetensors, GGUF and
//! MATRIX-ATOM ([`crate::atoms`]).
//!
//! ```
//! use zt_format::source::Probe;
//! use zt_format::{Limits, Source};
//!
//! // A safetensors file with one f32 tensor of two elements.
//! let header = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
//! let mut file = (header.len() as u64).to_le_bytes().to_vec();
//! file.extend_from_slice(header);
//! file.extend_from_slice(&[0u8; 8]);
//!
//! let mut probe = Probe::new(Source::Safetensors, "w.safetensors", file.len() as u64, Limits::default());
//! while let Some(range) = probe.next_read() {
//!     let bytes = &file[range.start as usize..range.end as usize];
//!     probe.feed(bytes)?;
//! }
//! let loaded = probe.finish()?;
//! assert_eq!(loaded.parsed.manifest.objects["w"].components["data"].offset, 8 + header.len() as u64);
//! # Ok::<(), zt_format::Error>(())
//! ```

pub(crate) mod gguf;
mod matrix_atom;
pub mod matrix_atom_pack;
mod safetensors;
pub mod safetensors_index;
mod zt;

use std::ops::Range;

use crate::container::Parsed;
use crate::error::{Error, Location, Result, Rule};
use crate::manifest::Source;
use crate::options::Limits;

pub use gguf::{INLINE_ARRAY as GGUF_INLINE_ARRAY, METADATA_PREFIX as GGUF_METADATA_PREFIX};
pub use matrix_atom::header_of as atom_header;
pub use safetensors::DTYPES as SAFETENSORS_DTYPES;

/// A source's manifest and the header bytes it was read from.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub parsed: Parsed,
    /// The header exactly as stored: the CBOR manifest of a `.zt` file,
    /// the JSON header of a safetensors file.
    pub raw: Vec<u8>,
}

/// `dir/ingest_manifest.json`, lower-cased, ends with this.
const PACK_SUFFIX: &str = "/ingest_manifest.json";

/// Which source a file name says it is, by extension (an ingest pack by
/// its manifest's name, `ingest_manifest.json`); `None` for files that
/// are not served.
pub fn by_name(name: &str) -> Option<Source> {
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".safetensors.index.json") {
        Some(Source::SafetensorsIndex)
    } else if lower == crate::atoms::PACK_MANIFEST || lower.ends_with(PACK_SUFFIX) {
        Some(Source::MatrixAtomPack)
    } else if lower.ends_with(".zt") {
        Some(Source::Zt)
    } else if lower.ends_with(".safetensors") {
        Some(Source::Safetensors)
    } else if lower.ends_with(".gguf") {
        Some(Source::Gguf)
    } else if lower.ends_with(".atoms") || lower.ends_with(".bin") || lower.ends_with(".svgt") {
        // `.bin` names many things: confirmed by magic ([`magic`]).
        Some(Source::MatrixAtom)
    } else {
        None
    }
}

/// The 8 bytes one of which a file of `source` must start with when its
/// extension alone does not say it is one (a MATRIX-ATOM file named
/// `.bin`; an SVG-Tensor projection): a catalog reads them before listing
/// the file, and passes over a file without them as one that is not served.
pub fn magic(source: Source) -> Option<[&'static [u8; 8]; 2]> {
    match source {
        Source::MatrixAtom => Some([crate::atoms::MAGIC, crate::atoms::svg_tensor::MAGIC]),
        _ => None,
    }
}

/// A check the source format stores for a component's bytes beside any
/// digest (MATRIX-ATOM's `payload_crc32` over the `atoms` payload), for
/// whoever reads those bytes whole to verify them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredCrc {
    /// CRC-32 (zlib's) the bytes must have.
    pub crc32: u32,
    /// The rule a mismatch breaks.
    pub rule: &'static str,
}

/// The [`StoredCrc`] of `object`'s `role` in `m`, if its source keeps one.
pub fn stored_crc(m: &crate::Manifest, object: &str, role: &str) -> Option<StoredCrc> {
    if m.source != Source::MatrixAtom || object != "atoms" || role != "data" {
        return None;
    }
    match m.attributes.get("matrix_atom.payload_crc32")? {
        crate::manifest::CborValue::Integer(i) => Some(StoredCrc {
            crc32: u32::try_from(u64::try_from(*i).ok()?).ok()?,
            rule: "atom-payload-crc",
        }),
        _ => None,
    }
}

/// Reads one file's header through a plan of byte-range reads.
#[derive(Debug)]
pub struct Probe {
    label: String,
    size: u64,
    limits: Limits,
    state: State,
}

#[derive(Debug)]
enum State {
    Zt(zt::Plan),
    Safetensors(safetensors::Plan),
    Gguf(gguf::Plan),
    MatrixAtom(matrix_atom::Plan),
    /// A source this build cannot read yet.
    Unsupported(Source),
}

impl Probe {
    /// A probe of a `size`-byte file of the given source; `label` names
    /// the file in every error.
    pub fn new(source: Source, label: &str, size: u64, limits: Limits) -> Probe {
        let state = match source {
            Source::Zt => State::Zt(zt::Plan::new(size)),
            Source::Safetensors => State::Safetensors(safetensors::Plan::new(size)),
            Source::Gguf => State::Gguf(gguf::Plan::new(size)),
            Source::MatrixAtom => State::MatrixAtom(matrix_atom::Plan::new(size)),
            other => State::Unsupported(other),
        };
        Probe {
            label: label.to_owned(),
            size,
            limits,
            state,
        }
    }

    /// The next byte range to read (never past the file's end), or `None`
    /// when [`Probe::finish`] can be called.
    pub fn next_read(&self) -> Option<Range<u64>> {
        match &self.state {
            State::Zt(p) => p.next_read(),
            State::Safetensors(p) => p.next_read(),
            State::Gguf(p) => p.next_read(),
            State::MatrixAtom(p) => p.next_read(),
            State::Unsupported(_) => None,
        }
    }

    /// Hands over the bytes of the range [`Probe::next_read`] named; fails
    /// as soon as they break a rule (or are not the length asked for).
    pub fn feed(&mut self, bytes: &[u8]) -> Result<()> {
        let asked = self.next_read();
        if let Some(r) = &asked {
            if bytes.len() as u64 != r.end.saturating_sub(r.start) {
                return Err(Error::io(
                    Location::file(&self.label),
                    "reading the header",
                    std::io::Error::other(format!(
                        "asked for bytes {}..{}, got {} bytes",
                        r.start,
                        r.end,
                        bytes.len()
                    )),
                ));
            }
        }
        match &mut self.state {
            State::Zt(p) => p.feed(bytes, &self.label, self.size, &self.limits),
            State::Safetensors(p) => p.feed(bytes, &self.label, &self.limits),
            State::Gguf(p) => p.feed(bytes, &self.label, &self.limits),
            State::MatrixAtom(p) => p.feed(bytes, &self.label, &self.limits),
            State::Unsupported(_) => Ok(()),
        }
    }

    /// Runs the probe to its end with `read(range)`, the caller's
    /// blocking I/O (a caller on an async runtime drives
    /// [`Probe::next_read`] and [`Probe::feed`] itself).
    pub fn run(mut self, mut read: impl FnMut(Range<u64>) -> Result<Vec<u8>>) -> Result<Loaded> {
        while let Some(r) = self.next_read() {
            let bytes = read(r)?;
            self.feed(&bytes)?;
        }
        self.finish()
    }

    /// The validated manifest, once every read is done.
    pub fn finish(self) -> Result<Loaded> {
        let at = Location::file(&self.label);
        if self.next_read().is_some() {
            return Err(incomplete(&self.label));
        }
        let limits = self.limits;
        let loaded = self.finish_source(at.clone())?;
        // Every source's objects, however they were read, against
        // `limits.manifest_memory` (each source also refuses as it reads).
        let objects = loaded.parsed.manifest.objects.len() as u64;
        limits
            .within_memory(objects, loaded.raw.len() as u64)
            .map_err(|rule| Error::invalid(at, rule))?;
        Ok(loaded)
    }

    fn finish_source(self, at: Location) -> Result<Loaded> {
        match self.state {
            State::Zt(p) => p.finish(&self.label, &self.limits),
            State::Safetensors(p) => p.finish(&self.label, self.size, &self.limits),
            State::Gguf(p) => p.finish(&self.label),
            State::MatrixAtom(p) => p.finish(&self.label),
            State::Unsupported(Source::SafetensorsIndex) => Err(Error::invalid(
                at,
                Rule::Header {
                    rule: "unsupported-source",
                    detail: "a sharded checkpoint's index says nothing of offsets: a ztserve links it to its shards (fetch the index from one), or fetch each shard's URL".to_owned(),
                },
            )),
            State::Unsupported(Source::MatrixAtomPack) => Err(Error::invalid(
                at,
                Rule::Header {
                    rule: "unsupported-source",
                    detail: "an ingest pack's manifest says nothing of offsets: a ztserve serves it with the files of its pack (fetch it from one), or read the pack with zt ingest verify".to_owned(),
                },
            )),
            State::Unsupported(source) => Err(Error::invalid(
                at,
                Rule::Header {
                    rule: "unsupported-source",
                    detail: format!("{source} files cannot be read by this build"),
                },
            )),
        }
    }
}

/// `finish` before every read was fed.
fn incomplete(label: &str) -> Error {
    Error::invalid(
        Location::file(label),
        Rule::Header {
            rule: "incomplete-read",
            detail: "the header was not read to its end".to_owned(),
        },
    )
}

/// Parses a whole file held in memory (what [`crate::ZtFile`] does with
/// its bytes).
pub(crate) fn parse(source: Source, label: &str, data: &[u8], limits: &Limits) -> Result<Loaded> {
    let probe = Probe::new(source, label, data.len() as u64, *limits);
    probe.run(|r| {
        let start = usize::try_from(r.start).unwrap_or(usize::MAX);
        let end = usize::try_from(r.end).unwrap_or(usize::MAX);
        data.get(start..end).map(<[u8]>::to_vec).ok_or_else(|| {
            Error::io(
                Location::file(label),
                "reading the header",
                std::io::Error::other("range outside the data"),
            )
        })
    })
}
