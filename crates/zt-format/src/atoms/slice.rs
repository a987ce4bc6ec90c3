//! Atoms `[start, end)` of a MATRIX-ATOM file as a file of their own
//! (`zt fetch --atoms I..J`): a new header (counts, both CRCs; the
//! SVG-Tensor flag cleared, since no projection comes along) and the
//! document index rebased, each document clipped to the atoms kept (a
//! document's real tokens come first, so its clipped token count is
//! exact); documents outside the range are dropped.

use super::header::{crc32, AtomHeader, FLAG_INDEX, FLAG_SVG_TENSOR, HEADER_LEN};
use super::index::{self, DocEntry};

/// The file of atoms `start..end` of a file with header `h` and document
/// index `docs`, given `payload`, exactly those atoms' bytes.
pub fn cut(
    h: &AtomHeader,
    docs: Option<&[DocEntry]>,
    start: u64,
    end: u64,
    payload: &[u8],
) -> Vec<u8> {
    let count = end.saturating_sub(start);
    let size = u64::from(h.atom_size);
    let kept: Option<Vec<DocEntry>> = docs.map(|docs| {
        docs.iter()
            .filter_map(|d| {
                let (a, b) = (
                    d.first_atom.max(start),
                    d.first_atom.saturating_add(d.atom_count).min(end),
                );
                if a >= b && !(d.atom_count == 0 && d.first_atom >= start && d.first_atom < end) {
                    return None;
                }
                let skipped = a.saturating_sub(d.first_atom).saturating_mul(size);
                let atoms = b.saturating_sub(a);
                Some(DocEntry {
                    first_atom: a.saturating_sub(start),
                    atom_count: atoms,
                    token_count: d
                        .token_count
                        .saturating_sub(skipped)
                        .min(atoms.saturating_mul(size)),
                })
            })
            .collect()
    });
    let mut flags = h.flags & !FLAG_SVG_TENSOR;
    if kept.is_none() {
        flags &= !FLAG_INDEX;
    }
    let header = AtomHeader {
        flags,
        atom_count: count,
        token_count: count.saturating_mul(size),
        data_offset: HEADER_LEN as u64,
        header_crc32: 0,
        payload_crc32: crc32(payload),
        ..h.clone()
    };
    let mut out = header.encode().to_vec();
    out.extend_from_slice(payload);
    if let Some(docs) = kept {
        out.extend_from_slice(&index::encode(&docs));
    }
    out
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::atoms::pack::{PackOptions, Packer};
    use crate::atoms::AtomDtype;

    #[test]
    fn a_cut_is_a_valid_file_with_its_documents_clipped() {
        let mut p = Packer::new(PackOptions {
            atom_size: 2,
            dtype: AtomDtype::U16,
            vocab_size: 50,
            pad_id: 0,
            index: true,
            svg_tensor: true,
        })
        .unwrap();
        p.push(&[1, 2, 3, 4, 5]).unwrap(); // atoms 0..3, 5 tokens
        p.push(&[6, 7, 8]).unwrap(); // atoms 3..5, 3 tokens
        let full = p.finish();
        // Atoms 1..4: the first document's atoms 1 and 2 (3 real tokens),
        // the second's atom 3 (2 tokens).
        let payload = &full.bytes[64 + 4..64 + 16];
        let cut = cut(&full.header, Some(&full.documents), 1, 4, payload);
        let h = AtomHeader::parse(&cut, cut.len() as u64).unwrap();
        assert_eq!((h.atom_count, h.token_count, h.flags), (3, 6, FLAG_INDEX));
        h.check_payload(&cut[64..76]).unwrap();
        let docs = index::parse(&cut[76..], 3, 2).unwrap();
        assert_eq!(
            docs,
            [
                DocEntry {
                    first_atom: 0,
                    atom_count: 2,
                    token_count: 3
                },
                DocEntry {
                    first_atom: 2,
                    atom_count: 1,
                    token_count: 2
                },
            ]
        );
        let plain = super::cut(&full.header, None, 0, 1, &full.bytes[64..68]);
        let h = AtomHeader::parse(&plain, plain.len() as u64).unwrap();
        assert_eq!(h.flags, 0);
    }
}
