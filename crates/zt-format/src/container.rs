//! Finding and decoding the manifest: header, footer, size bounds, version
//! detection. Works on byte slices only, so it serves both the mmap path and
//! the `pread` path of the server.

use crate::cbor::{self, Map};
use crate::error::{Error, Location, Result, Rule};
use crate::manifest::Manifest;
use crate::options::Limits;
use crate::validate::{self, BlobArea};
use crate::warning::Warning;
use crate::{legacy, parse_v1};

/// The v1 magic, at the start of every v1.x file and the end of v1.1+ files.
pub const MAGIC: &[u8; 8] = b"ZTEN1000";
/// The v0.1 magic.
pub const MAGIC_V0_1: &[u8; 8] = b"ZTEN0001";
/// Bytes the footer takes in a v1.2 file: the manifest size and the magic.
pub const FOOTER_LEN: u64 = 16;

/// Where the manifest lies, read from the header and the last 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestLocation {
    pub offset: u64,
    pub length: u64,
    pub file_size: u64,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    V1,
    /// `ZTEN1000` without footer magic: a v1.0 file, or a v1.2 file whose footer is damaged.
    V1_0OrBadFooter,
    V0_1,
    /// Not a `.zt` file: the manifest was derived from another source's header.
    Header,
}

impl ManifestLocation {
    /// Where another source's header lies (`length` bytes at `offset`).
    pub(crate) fn header(offset: u64, length: u64, file_size: u64) -> Self {
        ManifestLocation {
            offset,
            length,
            file_size,
            kind: Kind::Header,
        }
    }
}

/// A decoded, validated manifest and what was noticed on the way.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub manifest: Manifest,
    pub location: ManifestLocation,
    pub blob_area: BlobArea,
    pub warnings: Vec<Warning>,
    /// The bytes of every synthesized component, by object and role.
    pub synthesized: Synthesized,
}

/// Synthesized components' bytes by (object, role).
pub type Synthesized = std::collections::BTreeMap<(String, String), Vec<u8>>;

fn u64_le(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(..8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

/// Reads the header (first 8 bytes) and tail (last 16 bytes) and says where the manifest is.
pub(crate) fn locate(
    file: &str,
    file_size: u64,
    head: &[u8],
    tail: &[u8],
    limits: &Limits,
) -> Result<ManifestLocation> {
    let at = Location::file(file);
    let inv = |rule| Error::invalid(at.clone(), rule);
    let head = head
        .get(..8)
        .ok_or_else(|| inv(Rule::TooShort { size: file_size }))?;
    let (footer_size, kind) = if head == MAGIC {
        let tail = tail.get(..16).filter(|_| file_size >= 24);
        let tail = tail.ok_or_else(|| inv(Rule::TooShort { size: file_size }))?;
        let (size, magic) = tail.split_at(8);
        if magic == MAGIC {
            (u64_le(size), Kind::V1)
        } else {
            (u64_le(magic), Kind::V1_0OrBadFooter)
        }
    } else if head == MAGIC_V0_1 {
        let t = tail
            .get(8..16)
            .filter(|_| file_size >= 17)
            .ok_or_else(|| inv(Rule::TooShort { size: file_size }))?;
        (u64_le(t), Kind::V0_1)
    } else {
        return Err(inv(Rule::HeaderMagic {
            found: String::from_utf8_lossy(head).into_owned(),
        }));
    };
    let bad_footer = || {
        inv(Rule::FooterMagic {
            found: String::from_utf8_lossy(tail.get(8..16).unwrap_or_default()).into_owned(),
        })
    };
    if footer_size > limits.manifest_cap {
        return Err(match kind {
            Kind::V1_0OrBadFooter => bad_footer(),
            _ => inv(Rule::ManifestOverCap {
                size: footer_size,
                cap: limits.manifest_cap,
            }),
        });
    }
    // v1.2: manifest_size <= file_size - 16. Legacy files end with the size
    // alone, but still hold an 8-byte header before the manifest.
    let trailer = match kind {
        Kind::V1 => FOOTER_LEN,
        Kind::V1_0OrBadFooter | Kind::V0_1 | Kind::Header => 8,
    };
    let max = match kind {
        Kind::V1 => file_size.saturating_sub(FOOTER_LEN),
        _ => file_size.saturating_sub(16),
    };
    if footer_size > max {
        return Err(match kind {
            Kind::V1_0OrBadFooter => bad_footer(),
            _ => inv(Rule::ManifestTooLarge {
                size: footer_size,
                file_size,
                max,
            }),
        });
    }
    let offset = file_size
        .saturating_sub(trailer)
        .saturating_sub(footer_size);
    Ok(ManifestLocation {
        offset,
        length: footer_size,
        file_size,
        kind,
    })
}

/// Decodes and validates the manifest bytes found by [`locate`].
pub(crate) fn decode(
    file: &str,
    loc: &ManifestLocation,
    bytes: &[u8],
    limits: &Limits,
) -> Result<Parsed> {
    let at = Location::file(file);
    let inv = |rule| Error::invalid(at.clone(), rule);
    let mut warnings = Vec::new();
    let manifest = match loc.kind {
        Kind::V1 => parse_v1::manifest(bytes, file, limits, &mut warnings)?,
        Kind::Header => {
            return Err(inv(Rule::Header {
                rule: "not-zt",
                detail: "this location is another source's header; read it with zt_format::source"
                    .to_owned(),
            }))
        }
        Kind::V0_1 => {
            legacy::manifest_v0_1(&cbor::decode(bytes, limits.max_depth).map_err(inv)?, &at)?
        }
        Kind::V1_0OrBadFooter => {
            let decoded = cbor::decode(bytes, limits.max_depth);
            let bad_footer = || {
                inv(Rule::FooterMagic {
                    found: format!("(no magic; {} is not a v1.0 manifest size)", loc.length),
                })
            };
            let root = decoded.map_err(|_| bad_footer())?;
            let map = Map::new(&root, "manifest").map_err(|_| bad_footer())?;
            if map.get("tensors").is_none() {
                return Err(bad_footer());
            }
            legacy::manifest_v1_0(&map, &at, &mut warnings)?
        }
    };
    // Blobs live between the header and the manifest. v1.2 puts the first
    // at 64; legacy files were allowed to start right after the header.
    let blob_area = BlobArea {
        start: MAGIC.len() as u64,
        end: loc.offset,
    };
    validate::manifest(&manifest, blob_area, &at, &mut warnings)?;
    Ok(Parsed {
        manifest,
        location: *loc,
        blob_area,
        warnings,
        synthesized: Synthesized::new(),
    })
}

/// Parses a whole `.zt` file held in memory.
pub(crate) fn parse(file: &str, data: &[u8], limits: &Limits) -> Result<Parsed> {
    let size = data.len() as u64;
    let tail_start = data.len().saturating_sub(16);
    let loc = locate(
        file,
        size,
        data.get(..8).unwrap_or(data),
        data.get(tail_start..).unwrap_or_default(),
        limits,
    )?;
    let start = usize::try_from(loc.offset).unwrap_or(usize::MAX);
    let end = start.saturating_add(usize::try_from(loc.length).unwrap_or(usize::MAX));
    let bytes = data.get(start..end).ok_or_else(|| {
        Error::invalid(
            Location::file(file),
            Rule::ManifestTooLarge {
                size: loc.length,
                file_size: size,
                max: size,
            },
        )
    })?;
    decode(file, &loc, bytes, limits)
}

/// What a received manifest describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// The file's objects as stored.
    File,
    /// Parts of components (row ranges): offsets lie where the parts
    /// start, so they need not be 64-byte aligned.
    Parts,
}

/// Decodes a standalone v1.2 manifest (as a server sends it, filtered)
/// that describes `view` of a file of `file_size` bytes, and validates it
/// against that file: offsets must lie between the header and the footer,
/// aligned (for [`View::File`]) and without overlaps.
pub fn decode_manifest(
    file: &str,
    bytes: &[u8],
    file_size: u64,
    limits: &Limits,
    view: View,
) -> Result<(Manifest, Vec<Warning>)> {
    let at = Location::file(file);
    if bytes.len() as u64 > limits.manifest_cap {
        return Err(Error::invalid(
            at,
            Rule::ManifestOverCap {
                size: bytes.len() as u64,
                cap: limits.manifest_cap,
            },
        ));
    }
    let mut warnings = Vec::new();
    let manifest = parse_v1::manifest(bytes, file, limits, &mut warnings)?;
    // A `.zt` file keeps its blobs between header and footer; other
    // sources' headers and tensors may lie anywhere in the file.
    let area = if manifest.source.is_aligned() {
        BlobArea {
            start: MAGIC.len() as u64,
            end: file_size.saturating_sub(FOOTER_LEN),
        }
    } else {
        BlobArea {
            start: 0,
            end: file_size,
        }
    };
    let aligned = manifest.source.is_aligned() && view == View::File;
    validate::manifest_with(&manifest, area, aligned, &at, &mut warnings)?;
    Ok((manifest, warnings))
}
