//! The SVG-Tensor v1 header (seed 002, section 4.2): 32 bytes,
//! little-endian, then every atom as a `rows x cols` grid of `u16` token
//! ids in row-major order. It is a projection of a MATRIX-ATOM file,
//! never a replacement: `rows * cols` equals that file's `atom_size`, its
//! `atom_count` the file's, and its payload the file's payload (which
//! must be `u16`: a `u32` file has no projection).

use std::fmt;

use super::header::{AtomDtype, AtomHeader};

/// The first 8 bytes of every SVG-Tensor file.
pub const MAGIC: &[u8; 8] = b"SVGTENSR";
/// The header's size in v1.
pub const HEADER_LEN: usize = 32;

/// An SVG-Tensor v1 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SvgHeader {
    pub rows: u16,
    pub cols: u16,
    pub atom_count: u64,
    pub data_offset: u64,
}

/// A rule of the SVG-Tensor header that a file breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SvgRule {
    Truncated(u64),
    Magic,
    Version(u16),
    HeaderBytes(u16),
    EmptyGrid {
        rows: u16,
        cols: u16,
    },
    DataOffset(u64),
    PayloadSize {
        expected: u64,
        available: u64,
    },
    /// The grid does not fit the atom file it projects.
    GridMismatch {
        cells: u64,
        atom_size: u32,
    },
    AtomCountMismatch {
        svg: u64,
        atoms: u64,
    },
    PayloadMismatch,
    /// The atom file stores `u32` ids; SVG-Tensor stores `u16` only.
    U32Atoms,
}

impl SvgRule {
    pub fn name(&self) -> &'static str {
        match self {
            SvgRule::Truncated(_) => "svgt-truncated",
            SvgRule::Magic => "svgt-magic",
            SvgRule::Version(_) => "svgt-version",
            SvgRule::HeaderBytes(_) => "svgt-header-bytes",
            SvgRule::EmptyGrid { .. } => "svgt-grid",
            SvgRule::DataOffset(_) => "svgt-data-offset",
            SvgRule::PayloadSize { .. } => "svgt-payload-size",
            SvgRule::GridMismatch { .. } => "svgt-grid-mismatch",
            SvgRule::AtomCountMismatch { .. } => "svgt-atom-count",
            SvgRule::PayloadMismatch => "svgt-payload",
            SvgRule::U32Atoms => "svgt-u32-atoms",
        }
    }
}

impl fmt::Display for SvgRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SvgRule::Truncated(n) => write!(f, "{n} bytes: shorter than the 32-byte header"),
            SvgRule::Magic => write!(f, "the file does not start with SVGTENSR"),
            SvgRule::Version(v) => write!(f, "version {v}; this reader knows 1"),
            SvgRule::HeaderBytes(n) => write!(f, "header_bytes {n}; v1 headers are 32 bytes"),
            SvgRule::EmptyGrid { rows, cols } => write!(f, "a {rows}x{cols} grid holds no cell"),
            SvgRule::DataOffset(o) => write!(f, "data_offset {o}; v1 grids start at 32"),
            SvgRule::PayloadSize {
                expected,
                available,
            } => write!(
                f,
                "the grids need {expected} bytes after the header, the file has {available}"
            ),
            SvgRule::GridMismatch { cells, atom_size } => write!(
                f,
                "a grid of {cells} cells does not hold an atom of {atom_size} tokens"
            ),
            SvgRule::AtomCountMismatch { svg, atoms } => {
                write!(f, "{svg} grids for {atoms} atoms")
            }
            SvgRule::PayloadMismatch => write!(f, "the grids are not the atom file's tokens"),
            SvgRule::U32Atoms => write!(
                f,
                "the atom file stores uint32 ids; SVG-Tensor stores uint16 only"
            ),
        }?;
        write!(f, " [{}]", self.name())
    }
}

impl SvgHeader {
    /// The grid of `atoms` as `rows x cols`: refused by name unless it
    /// holds exactly one atom and the atoms are `u16`.
    pub fn for_atoms(atoms: &AtomHeader, rows: u16, cols: u16) -> Result<SvgHeader, SvgRule> {
        fits(atoms, rows, cols)?;
        Ok(SvgHeader {
            rows,
            cols,
            atom_count: atoms.atom_count,
            data_offset: HEADER_LEN as u64,
        })
    }

    /// The grids' size in bytes.
    pub fn payload_len(&self) -> Option<u64> {
        cells(self.rows, self.cols)
            .checked_mul(self.atom_count)?
            .checked_mul(2)
    }

    /// Parses and checks the header of a file of `file_size` bytes.
    pub fn parse(bytes: &[u8], file_size: u64) -> Result<SvgHeader, SvgRule> {
        let Some(b) = bytes.get(..HEADER_LEN) else {
            return Err(SvgRule::Truncated(bytes.len() as u64));
        };
        if b.get(..8) != Some(&MAGIC[..]) {
            return Err(SvgRule::Magic);
        }
        let field = |at: usize, n: usize| b.get(at..).and_then(|s| s.get(..n)).unwrap_or(&[]);
        let u16_at = |at| u16::from_le_bytes(field(at, 2).try_into().unwrap_or([0; 2]));
        let u64_at = |at| u64::from_le_bytes(field(at, 8).try_into().unwrap_or([0; 8]));
        let version = u16_at(0x08);
        if version != 1 {
            return Err(SvgRule::Version(version));
        }
        let header_bytes = u16_at(0x0A);
        if usize::from(header_bytes) != HEADER_LEN {
            return Err(SvgRule::HeaderBytes(header_bytes));
        }
        let h = SvgHeader {
            rows: u16_at(0x0C),
            cols: u16_at(0x0E),
            atom_count: u64_at(0x10),
            data_offset: u64_at(0x18),
        };
        if h.rows == 0 || h.cols == 0 {
            return Err(SvgRule::EmptyGrid {
                rows: h.rows,
                cols: h.cols,
            });
        }
        if h.data_offset != HEADER_LEN as u64 {
            return Err(SvgRule::DataOffset(h.data_offset));
        }
        let expected = h.payload_len().unwrap_or(u64::MAX);
        let available = file_size.saturating_sub(h.data_offset);
        if expected != available {
            return Err(SvgRule::PayloadSize {
                expected,
                available,
            });
        }
        Ok(h)
    }

    /// Checks this projection against the atom file it projects.
    pub fn check_against(&self, atoms: &AtomHeader) -> Result<(), SvgRule> {
        fits(atoms, self.rows, self.cols)?;
        if self.atom_count != atoms.atom_count {
            return Err(SvgRule::AtomCountMismatch {
                svg: self.atom_count,
                atoms: atoms.atom_count,
            });
        }
        Ok(())
    }

    /// The 32 header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        let fields: [(usize, &[u8]); 7] = [
            (0, MAGIC),
            (0x08, &1u16.to_le_bytes()),
            (0x0A, &(HEADER_LEN as u16).to_le_bytes()),
            (0x0C, &self.rows.to_le_bytes()),
            (0x0E, &self.cols.to_le_bytes()),
            (0x10, &self.atom_count.to_le_bytes()),
            (0x18, &self.data_offset.to_le_bytes()),
        ];
        for (at, v) in fields {
            if let Some(dst) = b.get_mut(at..).and_then(|d| d.get_mut(..v.len())) {
                dst.copy_from_slice(v);
            }
        }
        b
    }
}

fn cells(rows: u16, cols: u16) -> u64 {
    u64::from(rows).saturating_mul(u64::from(cols))
}

/// Whether a `rows x cols` grid holds exactly one of `atoms`' atoms, of `u16` ids.
fn fits(atoms: &AtomHeader, rows: u16, cols: u16) -> Result<(), SvgRule> {
    if atoms.dtype != AtomDtype::U16 {
        return Err(SvgRule::U32Atoms);
    }
    let cells = cells(rows, cols);
    if cells != u64::from(atoms.atom_size) {
        return Err(SvgRule::GridMismatch {
            cells,
            atom_size: atoms.atom_size,
        });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::atoms::header::crc32;

    #[test]
    fn a_grid_fits_its_atoms_or_is_refused_by_name() {
        let atoms = AtomHeader {
            dtype: AtomDtype::U16,
            flags: 1,
            vocab_size: 100,
            atom_size: 6,
            atom_count: 2,
            token_count: 12,
            data_offset: 64,
            header_crc32: 0,
            payload_crc32: crc32(&[0; 24]),
        };
        let h = SvgHeader::for_atoms(&atoms, 2, 3).unwrap();
        let b = h.encode();
        let back = SvgHeader::parse(&b, 32 + 24).unwrap();
        assert_eq!(back, h);
        back.check_against(&atoms).unwrap();
        assert_eq!(
            SvgHeader::for_atoms(&atoms, 2, 2).unwrap_err().name(),
            "svgt-grid-mismatch"
        );
        let wide = AtomHeader {
            dtype: AtomDtype::U32,
            ..atoms.clone()
        };
        assert_eq!(
            SvgHeader::for_atoms(&wide, 2, 3).unwrap_err().name(),
            "svgt-u32-atoms"
        );
        assert_eq!(
            SvgHeader::parse(&b, 50).unwrap_err().name(),
            "svgt-payload-size"
        );
        let mut z = b;
        z[0x0C] = 0;
        assert_eq!(SvgHeader::parse(&z, 56).unwrap_err().name(), "svgt-grid");
        let other = AtomHeader {
            atom_count: 3,
            token_count: 18,
            ..atoms
        };
        assert_eq!(
            back.check_against(&other).unwrap_err().name(),
            "svgt-atom-count"
        );
    }
}
