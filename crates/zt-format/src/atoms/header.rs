//! The MATRIX-ATOM v1 header (seed 002, section 2.1): 64 bytes,
//! little-endian, read and written here and nowhere else, with every
//! rule a reader checks named.
//!
//! Decisions the seed leaves open (docs/matrix-atom.md):
//! - CRC32 is IEEE 802.3 (zlib's); `header_crc32` covers the 64 header
//!   bytes with that field zeroed; `payload_crc32` covers the whole
//!   payload, padding included.
//! - `token_count` counts the payload's tokens after padding, so
//!   `atom_count * atom_size == token_count` holds exactly.
//! - `data_offset` is 64 in v1; the payload runs to the end of the file,
//!   unless flag bit 1 says a document index follows it.

use std::fmt;

/// The first 8 bytes of every MATRIX-ATOM file.
pub const MAGIC: &[u8; 8] = b"MTRXATOM";
/// The header's size in v1.
pub const HEADER_LEN: usize = 64;
/// Flag bit 0: an SVG-Tensor projection of these atoms exists.
pub const FLAG_SVG_TENSOR: u8 = 1;
/// Flag bit 1: a document index follows the payload.
pub const FLAG_INDEX: u8 = 2;

/// The element type of the token ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomDtype {
    U16,
    U32,
}

impl AtomDtype {
    pub fn id(self) -> u8 {
        match self {
            AtomDtype::U16 => 1,
            AtomDtype::U32 => 2,
        }
    }

    pub fn size(self) -> u64 {
        match self {
            AtomDtype::U16 => 2,
            AtomDtype::U32 => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AtomDtype::U16 => "uint16",
            AtomDtype::U32 => "uint32",
        }
    }

    /// The narrowest type holding every id below `vocab_size`.
    pub fn for_vocab(vocab_size: u64) -> AtomDtype {
        if vocab_size <= 1 << 16 {
            AtomDtype::U16
        } else {
            AtomDtype::U32
        }
    }
}

/// A MATRIX-ATOM v1 header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AtomHeader {
    pub dtype: AtomDtype,
    pub flags: u8,
    pub vocab_size: u32,
    pub atom_size: u32,
    pub atom_count: u64,
    pub token_count: u64,
    pub data_offset: u64,
    pub header_crc32: u32,
    pub payload_crc32: u32,
}

/// A rule of the header that a file breaks, with what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtomRule {
    Magic,
    Version(u16),
    HeaderBytes(u16),
    Dtype(u8),
    Flags(u8),
    Reserved,
    HeaderCrc {
        stored: u32,
        computed: u32,
    },
    AtomSize,
    Counts {
        atom_count: u64,
        atom_size: u32,
        token_count: u64,
    },
    DataOffset(u64),
    PayloadSize {
        expected: u64,
        available: u64,
    },
    PayloadCrc {
        stored: u32,
        computed: u32,
    },
    TokenOutOfRange {
        index: u64,
        id: u32,
        vocab_size: u32,
    },
    Truncated(u64),
}

impl AtomRule {
    /// The rule's name, as errors and the reject corpus name it.
    pub fn name(&self) -> &'static str {
        match self {
            AtomRule::Magic => "atom-magic",
            AtomRule::Version(_) => "atom-version",
            AtomRule::HeaderBytes(_) => "atom-header-bytes",
            AtomRule::Dtype(_) => "atom-dtype",
            AtomRule::Flags(_) => "atom-flags",
            AtomRule::Reserved => "atom-reserved",
            AtomRule::HeaderCrc { .. } => "atom-header-crc",
            AtomRule::AtomSize => "atom-size",
            AtomRule::Counts { .. } => "atom-counts",
            AtomRule::DataOffset(_) => "atom-data-offset",
            AtomRule::PayloadSize { .. } => "atom-payload-size",
            AtomRule::PayloadCrc { .. } => "atom-payload-crc",
            AtomRule::TokenOutOfRange { .. } => "atom-token-range",
            AtomRule::Truncated(_) => "atom-truncated",
        }
    }
}

impl fmt::Display for AtomRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AtomRule::Magic => write!(f, "the file does not start with MTRXATOM"),
            AtomRule::Version(v) => write!(f, "version {v}; this reader knows 1"),
            AtomRule::HeaderBytes(n) => write!(f, "header_bytes {n}; v1 headers are 64 bytes"),
            AtomRule::Dtype(d) => write!(f, "dtype_id {d}; 1 (uint16) and 2 (uint32) are defined"),
            AtomRule::Flags(b) => write!(
                f,
                "flags {b:#04x} set bits other than 0 (svg_tensor) and 1 (index)"
            ),
            AtomRule::Reserved => write!(f, "reserved bytes (0x0E-0x0F, 0x38-0x3F) are not zero"),
            AtomRule::HeaderCrc { stored, computed } => write!(
                f,
                "header_crc32 {stored:#010x} does not match the header ({computed:#010x})"
            ),
            AtomRule::AtomSize => write!(f, "atom_size is 0"),
            AtomRule::Counts {
                atom_count,
                atom_size,
                token_count,
            } => write!(
                f,
                "atom_count {atom_count} x atom_size {atom_size} is not token_count {token_count}"
            ),
            AtomRule::DataOffset(o) => write!(f, "data_offset {o}; v1 payloads start at 64"),
            AtomRule::PayloadSize {
                expected,
                available,
            } => write!(
                f,
                "the payload needs {expected} bytes after the header, the file has {available}"
            ),
            AtomRule::PayloadCrc { stored, computed } => write!(
                f,
                "payload_crc32 {stored:#010x} does not match the payload ({computed:#010x})"
            ),
            AtomRule::TokenOutOfRange {
                index,
                id,
                vocab_size,
            } => write!(
                f,
                "token {index} is id {id}, outside vocab_size {vocab_size}"
            ),
            AtomRule::Truncated(n) => write!(f, "{n} bytes: shorter than the 64-byte header"),
        }?;
        write!(f, " [{}]", self.name())
    }
}

/// CRC-32 (IEEE 802.3, zlib's) of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut c = Crc32::new();
    c.update(bytes);
    c.finish()
}

/// CRC-32 (zlib's) over bytes handed in pieces.
#[derive(Debug)]
pub struct Crc32(crc_fast::Digest);

impl Default for Crc32 {
    fn default() -> Self {
        Crc32::new()
    }
}

impl Crc32 {
    pub fn new() -> Crc32 {
        Crc32(crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32IsoHdlc))
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn finish(self) -> u32 {
        u32::try_from(self.0.finalize()).unwrap_or(0)
    }
}

/// `N` bytes of `b` at `at`; zeros past its end (callers check lengths first).
fn le<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    b.get(at..)
        .and_then(|s| s.get(..N))
        .and_then(|s| s.try_into().ok())
        .unwrap_or([0; N])
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(le(b, at))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(le(b, at))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(le(b, at))
}

impl AtomHeader {
    /// The payload's size in bytes.
    pub fn payload_len(&self) -> Option<u64> {
        self.token_count.checked_mul(self.dtype.size())
    }

    /// Parses and checks the header of a file of `file_size` bytes: every
    /// rule but the payload's CRC and id bounds (which need the payload).
    pub fn parse(bytes: &[u8], file_size: u64) -> Result<AtomHeader, AtomRule> {
        let Some(b) = bytes.get(..HEADER_LEN) else {
            return Err(AtomRule::Truncated(bytes.len() as u64));
        };
        if b.get(..8) != Some(&MAGIC[..]) {
            return Err(AtomRule::Magic);
        }
        let version = u16_at(b, 0x08);
        if version != 1 {
            return Err(AtomRule::Version(version));
        }
        let header_bytes = u16_at(b, 0x0A);
        if usize::from(header_bytes) != HEADER_LEN {
            return Err(AtomRule::HeaderBytes(header_bytes));
        }
        let dtype = match b.get(0x0C).copied().unwrap_or(0) {
            1 => AtomDtype::U16,
            2 => AtomDtype::U32,
            other => return Err(AtomRule::Dtype(other)),
        };
        let flags = b.get(0x0D).copied().unwrap_or(0);
        if flags & !(FLAG_SVG_TENSOR | FLAG_INDEX) != 0 {
            return Err(AtomRule::Flags(flags));
        }
        let reserved = b.get(0x0E..0x10).into_iter().chain(b.get(0x38..0x40));
        if reserved.flatten().any(|&x| x != 0) {
            return Err(AtomRule::Reserved);
        }
        let stored = u32_at(b, 0x30);
        let mut zeroed = [0u8; HEADER_LEN];
        zeroed.copy_from_slice(b);
        if let Some(f) = zeroed.get_mut(0x30..0x34) {
            f.fill(0);
        }
        let computed = crc32(&zeroed);
        if stored != computed {
            return Err(AtomRule::HeaderCrc { stored, computed });
        }
        let h = AtomHeader {
            dtype,
            flags,
            vocab_size: u32_at(b, 0x10),
            atom_size: u32_at(b, 0x14),
            atom_count: u64_at(b, 0x18),
            token_count: u64_at(b, 0x20),
            data_offset: u64_at(b, 0x28),
            header_crc32: stored,
            payload_crc32: u32_at(b, 0x34),
        };
        if h.atom_size == 0 {
            return Err(AtomRule::AtomSize);
        }
        if h.atom_count.checked_mul(u64::from(h.atom_size)) != Some(h.token_count) {
            return Err(AtomRule::Counts {
                atom_count: h.atom_count,
                atom_size: h.atom_size,
                token_count: h.token_count,
            });
        }
        if h.data_offset != HEADER_LEN as u64 {
            return Err(AtomRule::DataOffset(h.data_offset));
        }
        let available = file_size.saturating_sub(h.data_offset);
        let expected = h.payload_len().unwrap_or(u64::MAX);
        let fits = if flags & FLAG_INDEX != 0 {
            expected <= available
        } else {
            expected == available
        };
        if !fits {
            return Err(AtomRule::PayloadSize {
                expected,
                available,
            });
        }
        Ok(h)
    }

    /// The 64 header bytes, `header_crc32` computed over them.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        fn put(b: &mut [u8; HEADER_LEN], at: usize, v: &[u8]) {
            if let Some(dst) = b.get_mut(at..).and_then(|d| d.get_mut(..v.len())) {
                dst.copy_from_slice(v);
            }
        }
        put(&mut b, 0, MAGIC);
        put(&mut b, 0x08, &1u16.to_le_bytes());
        put(&mut b, 0x0A, &(HEADER_LEN as u16).to_le_bytes());
        put(&mut b, 0x0C, &[self.dtype.id(), self.flags]);
        put(&mut b, 0x10, &self.vocab_size.to_le_bytes());
        put(&mut b, 0x14, &self.atom_size.to_le_bytes());
        put(&mut b, 0x18, &self.atom_count.to_le_bytes());
        put(&mut b, 0x20, &self.token_count.to_le_bytes());
        put(&mut b, 0x28, &self.data_offset.to_le_bytes());
        put(&mut b, 0x34, &self.payload_crc32.to_le_bytes());
        let crc = crc32(&b);
        put(&mut b, 0x30, &crc.to_le_bytes());
        b
    }

    /// Checks a payload against `payload_crc32` and `vocab_size`.
    pub fn check_payload(&self, payload: &[u8]) -> Result<(), AtomRule> {
        let computed = crc32(payload);
        if computed != self.payload_crc32 {
            return Err(AtomRule::PayloadCrc {
                stored: self.payload_crc32,
                computed,
            });
        }
        let size = usize::try_from(self.dtype.size()).unwrap_or(2);
        for (index, chunk) in payload.chunks_exact(size).enumerate() {
            let id = match self.dtype {
                AtomDtype::U16 => u32::from(u16_at(chunk, 0)),
                AtomDtype::U32 => u32_at(chunk, 0),
            };
            if id >= self.vocab_size {
                return Err(AtomRule::TokenOutOfRange {
                    index: index as u64,
                    id,
                    vocab_size: self.vocab_size,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    fn sample() -> (AtomHeader, Vec<u8>) {
        let payload: Vec<u8> = [5u16, 6, 7, 0]
            .iter()
            .flat_map(|t| t.to_le_bytes())
            .collect();
        let h = AtomHeader {
            dtype: AtomDtype::U16,
            flags: 0,
            vocab_size: 10,
            atom_size: 2,
            atom_count: 2,
            token_count: 4,
            data_offset: 64,
            header_crc32: 0,
            payload_crc32: crc32(&payload),
        };
        (h, payload)
    }

    #[test]
    fn a_header_round_trips_and_each_rule_is_named() {
        let (h, payload) = sample();
        let bytes = h.encode();
        let back = AtomHeader::parse(&bytes, 64 + 8).unwrap();
        assert_eq!(back.payload_crc32, h.payload_crc32);
        back.check_payload(&payload).unwrap();
        // zlib's CRC-32 of "123456789" is 0xCBF43926.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);

        let broken = |at: usize, v: u8| {
            let mut b = bytes;
            b[at] = v;
            AtomHeader::parse(&b, 72).unwrap_err().name()
        };
        assert_eq!(broken(0, b'X'), "atom-magic");
        assert_eq!(broken(0x08, 2), "atom-version");
        assert_eq!(broken(0x0A, 65), "atom-header-bytes");
        assert_eq!(broken(0x0C, 3), "atom-dtype");
        assert_eq!(broken(0x0D, 4), "atom-flags");
        assert_eq!(broken(0x39, 1), "atom-reserved");
        assert_eq!(broken(0x20, 5), "atom-header-crc");
        assert_eq!(
            AtomHeader::parse(&bytes, 70).unwrap_err().name(),
            "atom-payload-size"
        );
        assert_eq!(
            AtomHeader::parse(&bytes[..10], 10).unwrap_err().name(),
            "atom-truncated"
        );
        let counts = AtomHeader {
            token_count: 5,
            ..h.clone()
        };
        assert_eq!(
            AtomHeader::parse(&counts.encode(), 74).unwrap_err().name(),
            "atom-counts"
        );
        let mut bad = payload.clone();
        bad[0] = 11;
        assert_eq!(
            h.check_payload(&bad).unwrap_err().name(),
            "atom-payload-crc"
        );
        let fixed = AtomHeader {
            payload_crc32: crc32(&bad),
            ..h
        };
        let e = fixed.check_payload(&bad).unwrap_err();
        assert_eq!(e.name(), "atom-token-range");
        assert!(e.to_string().contains("token 0 is id 11"), "{e}");
    }
}
