//! Packing token ids into a MATRIX-ATOM file: documents one after
//! another, each starting on an atom boundary and padded to it with
//! `pad_id`, every id checked against `vocab_size`, then the header
//! (with both CRCs) and, on request, the document index.

use super::header::{crc32, AtomDtype, AtomHeader, FLAG_INDEX, FLAG_SVG_TENSOR, HEADER_LEN};
use super::index::{self, DocEntry};

/// How to pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackOptions {
    pub atom_size: u32,
    pub dtype: AtomDtype,
    pub vocab_size: u32,
    pub pad_id: u32,
    /// Write the document index (flag bit 1).
    pub index: bool,
    /// Set flag bit 0: an SVG-Tensor projection accompanies the file.
    pub svg_tensor: bool,
}

/// Why ids cannot be packed as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackError {
    /// `--dtype u16` with more ids than 65,536.
    DtypeTooNarrow {
        vocab_size: u32,
    },
    AtomSize,
    /// An id at or past `vocab_size` (document, position in it).
    Id {
        doc: u64,
        at: u64,
        id: u32,
        vocab_size: u32,
    },
}

impl std::fmt::Display for PackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PackError::DtypeTooNarrow { vocab_size } => write!(
                f,
                "a vocabulary of {vocab_size} ids does not fit uint16 (65,536 ids); use --dtype u32 [atom-dtype-narrow]"
            ),
            PackError::AtomSize => write!(f, "atom_size must be at least 1 [atom-size]"),
            PackError::Id {
                doc,
                at,
                id,
                vocab_size,
            } => write!(
                f,
                "document {doc}, token {at}: id {id} is outside vocab_size {vocab_size} [atom-token-range]"
            ),
        }
    }
}

impl std::error::Error for PackError {}

/// A packed file: its bytes and what they hold.
#[derive(Debug, Clone)]
pub struct Packed {
    pub bytes: Vec<u8>,
    pub header: AtomHeader,
    /// The tokens before padding.
    pub real_tokens: u64,
    pub documents: Vec<DocEntry>,
}

/// Packs documents of token ids one at a time.
#[derive(Debug)]
pub struct Packer {
    options: PackOptions,
    payload: Vec<u8>,
    documents: Vec<DocEntry>,
    atoms: u64,
    real_tokens: u64,
}

impl Packer {
    pub fn new(options: PackOptions) -> Result<Packer, PackError> {
        if options.atom_size == 0 {
            return Err(PackError::AtomSize);
        }
        if options.dtype == AtomDtype::U16 && u64::from(options.vocab_size) > 1 << 16 {
            return Err(PackError::DtypeTooNarrow {
                vocab_size: options.vocab_size,
            });
        }
        if options.pad_id >= options.vocab_size {
            return Err(PackError::Id {
                doc: 0,
                at: 0,
                id: options.pad_id,
                vocab_size: options.vocab_size,
            });
        }
        Ok(Packer {
            options,
            payload: Vec::new(),
            documents: Vec::new(),
            atoms: 0,
            real_tokens: 0,
        })
    }

    fn put(&mut self, id: u32) {
        match self.options.dtype {
            // Checked against vocab_size, which fits u16 for U16.
            AtomDtype::U16 => self
                .payload
                .extend_from_slice(&u16::try_from(id).unwrap_or(u16::MAX).to_le_bytes()),
            AtomDtype::U32 => self.payload.extend_from_slice(&id.to_le_bytes()),
        }
    }

    /// Adds one document, padded to a whole number of atoms.
    pub fn push(&mut self, ids: &[u32]) -> Result<(), PackError> {
        let doc = self.documents.len() as u64;
        let vocab = self.options.vocab_size;
        if let Some((at, &id)) = ids.iter().enumerate().find(|(_, &id)| id >= vocab) {
            return Err(PackError::Id {
                doc,
                at: at as u64,
                id,
                vocab_size: vocab,
            });
        }
        for &id in ids {
            self.put(id);
        }
        let size = u64::from(self.options.atom_size);
        let n = ids.len() as u64;
        let atoms = n.div_ceil(size);
        for _ in n..atoms.saturating_mul(size) {
            self.put(self.options.pad_id);
        }
        self.documents.push(DocEntry {
            first_atom: self.atoms,
            atom_count: atoms,
            token_count: n,
        });
        self.atoms = self.atoms.saturating_add(atoms);
        self.real_tokens = self.real_tokens.saturating_add(n);
        Ok(())
    }

    /// The file: header, payload and (if asked) the document index.
    pub fn finish(self) -> Packed {
        let o = self.options;
        let mut flags = 0;
        if o.index {
            flags |= FLAG_INDEX;
        }
        if o.svg_tensor {
            flags |= FLAG_SVG_TENSOR;
        }
        let header = AtomHeader {
            dtype: o.dtype,
            flags,
            vocab_size: o.vocab_size,
            atom_size: o.atom_size,
            atom_count: self.atoms,
            token_count: self.atoms.saturating_mul(u64::from(o.atom_size)),
            data_offset: HEADER_LEN as u64,
            header_crc32: 0,
            payload_crc32: crc32(&self.payload),
        };
        let head = header.encode();
        let mut bytes = Vec::with_capacity(HEADER_LEN.saturating_add(self.payload.len()));
        bytes.extend_from_slice(&head);
        bytes.extend_from_slice(&self.payload);
        if o.index {
            bytes.extend_from_slice(&index::encode(&self.documents));
        }
        let header = AtomHeader {
            header_crc32: u32::from_le_bytes([head[0x30], head[0x31], head[0x32], head[0x33]]),
            ..header
        };
        Packed {
            bytes,
            header,
            real_tokens: self.real_tokens,
            documents: self.documents,
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    fn options(index: bool) -> PackOptions {
        PackOptions {
            atom_size: 4,
            dtype: AtomDtype::U16,
            vocab_size: 100,
            pad_id: 0,
            index,
            svg_tensor: false,
        }
    }

    #[test]
    fn documents_start_on_atom_boundaries_and_the_file_reads_back() {
        for with_index in [false, true] {
            let mut p = Packer::new(options(with_index)).unwrap();
            p.push(&[1, 2, 3, 4, 5]).unwrap();
            p.push(&[]).unwrap();
            p.push(&[9, 9]).unwrap();
            let packed = p.finish();
            assert_eq!(packed.real_tokens, 7);
            assert_eq!(packed.header.atom_count, 3);
            let h = AtomHeader::parse(&packed.bytes, packed.bytes.len() as u64).unwrap();
            assert_eq!(h, packed.header);
            let payload = &packed.bytes[64..64 + 24];
            h.check_payload(payload).unwrap();
            let ids: Vec<u16> = payload
                .chunks(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            assert_eq!(ids, [1, 2, 3, 4, 5, 0, 0, 0, 9, 9, 0, 0]);
            if with_index {
                let docs = index::parse(&packed.bytes[88..], 3, 4).unwrap();
                assert_eq!(docs, packed.documents);
                assert_eq!(docs[1].atom_count, 0);
            }
        }
    }

    #[test]
    fn narrow_dtypes_and_ids_out_of_range_are_refused_by_name() {
        let wide = PackOptions {
            vocab_size: 70_000,
            ..options(false)
        };
        let e = Packer::new(wide).unwrap_err();
        assert!(e.to_string().contains("atom-dtype-narrow"), "{e}");
        let mut p = Packer::new(options(false)).unwrap();
        let e = p.push(&[1, 100]).unwrap_err();
        assert_eq!(
            e,
            PackError::Id {
                doc: 0,
                at: 1,
                id: 100,
                vocab_size: 100
            }
        );
    }
}
