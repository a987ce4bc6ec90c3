//! Where a `.zt` file's parts go, for a writer that places the blobs
//! itself: [`crate::Writer`] streams them in order, while a client writing
//! components as they arrive, in any order, lays the whole file out first
//! ([`single_file`]), writes each blob at its offset, and closes the file
//! with [`tail`]. The magic opens the file at offset 0, and the tail is
//! the manifest's CBOR, its length and the magic again, as every v1.2 file
//! ends.

use crate::aligned::alignment_for;
use crate::container::MAGIC;
use crate::manifest::{Manifest, Origin, Source};
use crate::order::send_order;

/// A laid-out file: the manifest it carries (every offset set) and where
/// its blobs end (where [`tail`] goes).
#[derive(Debug, Clone)]
pub struct Layout {
    pub manifest: Manifest,
    pub blob_end: u64,
}

/// `m`'s components laid out as one v1.2 `.zt` file, in send order
/// ([`send_order`]), each on the boundary [`alignment_for`] gives its
/// length (a page from 1 MiB on, for direct I/O; 64 bytes below), after
/// the magic. The manifest is that file's own: v1.2, source `.zt`, one
/// file, every component a range of it whose digest (checked as it
/// arrived) is the file's.
pub fn single_file(m: &Manifest) -> Layout {
    let order: Vec<(String, String)> = send_order(m, &[])
        .into_iter()
        .map(|(o, r, _)| (o.to_owned(), r.to_owned()))
        .collect();
    let mut out = m.clone();
    let mut pos = MAGIC.len() as u64;
    for (o, r) in order {
        if let Some(c) = out
            .objects
            .get_mut(&o)
            .and_then(|obj| obj.components.get_mut(&r))
        {
            pos = pos.next_multiple_of(alignment_for(c.length));
            c.offset = pos;
            pos = pos.saturating_add(c.length);
            c.digest_computed = false;
            c.synthesized = false;
            c.file = None;
        }
    }
    out.version = crate::SPEC_VERSION.to_owned();
    out.origin = Origin::V1;
    out.source = Source::Zt;
    out.files.clear();
    Layout {
        manifest: out,
        blob_end: pos,
    }
}

/// What follows the blobs: `m` as v1.2 CBOR, its length (8 bytes, little
/// endian) and the magic.
pub fn tail(m: &Manifest) -> Vec<u8> {
    let mut out = crate::encode::manifest_cbor(m);
    let len = out.len() as u64;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(MAGIC);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, ReadOptions, StoreOptions, Writer, ZtFile};

    /// A file laid out here and written blob by blob, out of order, reads
    /// back as the same objects.
    #[test]
    fn a_file_written_at_its_offsets_reads_back() {
        let mut w = Writer::new(Vec::new(), "in.zt").unwrap();
        let small: Vec<u8> = (0..100u8).collect();
        let big = vec![7u8; crate::PAGE_ALIGNED_FROM + 12];
        w.add_dense(
            "layers.1.w",
            &[100],
            DType::U8,
            &small,
            StoreOptions::default(),
        )
        .unwrap();
        w.add_dense(
            "layers.0.w",
            &[big.len() as u64],
            DType::U8,
            &big,
            StoreOptions::default(),
        )
        .unwrap();
        let src =
            ZtFile::from_bytes("in.zt", &w.finish().unwrap(), ReadOptions::default()).unwrap();
        let Layout { manifest, blob_end } = single_file(src.manifest());
        let mut file = vec![0u8; usize::try_from(blob_end).unwrap()];
        file.get_mut(..8).unwrap().copy_from_slice(MAGIC);
        for name in ["layers.1.w", "layers.0.w"] {
            let c = manifest.component(name, "data").unwrap();
            let at = usize::try_from(c.offset).unwrap();
            assert_eq!(c.offset % alignment_for(c.length), 0);
            let bytes = src.stored(name, "data").unwrap();
            file.get_mut(at..at + bytes.len())
                .unwrap()
                .copy_from_slice(bytes);
        }
        file.extend(tail(&manifest));
        let back = ZtFile::from_bytes("out.zt", &file, ReadOptions::default()).unwrap();
        assert_eq!(back.stored("layers.1.w", "data").unwrap(), &small[..]);
        assert_eq!(back.stored("layers.0.w", "data").unwrap(), &big[..]);
    }
}
