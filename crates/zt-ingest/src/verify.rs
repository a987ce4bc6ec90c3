//! `zt ingest verify`: an atom file (its header, both CRCs, padding, id
//! bounds, the document index), an SVG-Tensor file against its atom file,
//! and a whole pack (every hash of its ingest manifest, the symbol map,
//! and its counts against the atom file). Each finding names the file and
//! the rule.

use std::path::Path;

use zt_format::atoms::svg_tensor::SvgHeader;
use zt_format::atoms::{index, AtomHeader, FLAG_INDEX, HEADER_LEN};

use crate::error::{Error, Result};
use zt_format::atoms::ingest::{sha256, IngestManifest, ATOM_FILE, MANIFEST_FILE, SVG_FILE};
use zt_format::atoms::symbols::SymbolMap;

/// What a verified atom file holds.
#[derive(Debug, Clone)]
pub struct Verified {
    pub header: AtomHeader,
    pub documents: Option<Vec<index::DocEntry>>,
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(&path.display().to_string(), "reading", e))
}

/// Checks the atom file `bytes` (named `label`) whole.
pub fn atom_file(label: &str, bytes: &[u8]) -> Result<Verified> {
    let v = |r: String| Error::verify(label, r);
    let h = AtomHeader::parse(bytes, bytes.len() as u64).map_err(|r| v(r.to_string()))?;
    let start = usize::try_from(h.data_offset).unwrap_or(HEADER_LEN);
    let len = usize::try_from(h.payload_len().unwrap_or(0)).unwrap_or(0);
    let payload = bytes
        .get(start..start.saturating_add(len))
        .ok_or_else(|| v("the payload runs past the file [atom-payload-size]".into()))?;
    h.check_payload(payload).map_err(|r| v(r.to_string()))?;
    let documents = if h.flags & FLAG_INDEX != 0 {
        let rest = bytes.get(start.saturating_add(len)..).unwrap_or(&[]);
        // Padding is checked by `pack_dir`: the pad id is the map's.
        Some(index::parse(rest, h.atom_count, h.atom_size).map_err(|r| v(r.to_string()))?)
    } else {
        None
    };
    Ok(Verified {
        header: h,
        documents,
    })
}

/// Checks an SVG-Tensor file against the atom file it projects.
pub fn svg_file(label: &str, svgt: &[u8], atoms: &[u8], header: &AtomHeader) -> Result<()> {
    let v = |r: String| Error::verify(label, r);
    let s = SvgHeader::parse(svgt, svgt.len() as u64).map_err(|r| v(r.to_string()))?;
    s.check_against(header).map_err(|r| v(r.to_string()))?;
    let len = usize::try_from(header.payload_len().unwrap_or(0)).unwrap_or(0);
    let mine = svgt.get(32..).unwrap_or(&[]);
    let theirs = atoms
        .get(HEADER_LEN..HEADER_LEN.saturating_add(len))
        .unwrap_or(&[]);
    if mine != theirs {
        return Err(v(
            "the grids are not the atom file's tokens [svgt-payload]".to_owned()
        ));
    }
    Ok(())
}

/// Checks the pack in `dir` whole; returns its manifest.
pub fn pack_dir(dir: &Path) -> Result<IngestManifest> {
    let label = |name: &str| dir.join(name).display().to_string();
    let manifest_bytes = read(&dir.join(MANIFEST_FILE))?;
    let m: IngestManifest = serde_json::from_slice(&manifest_bytes).map_err(|e| {
        Error::verify(
            &label(MANIFEST_FILE),
            format!("not an ingest manifest: {e}"),
        )
    })?;
    let atoms = read(&dir.join(&m.atom_file))?;
    if sha256(&atoms) != m.hash {
        return Err(Error::verify(
            &label(&m.atom_file),
            format!(
                "its sha256 is not the manifest's hash {} [pack-hash]",
                m.hash
            ),
        ));
    }
    for (name, want) in &m.artifacts {
        if name.contains('/') || name.contains("..") {
            return Err(Error::verify(
                &label(MANIFEST_FILE),
                format!("artifact {name:?} is not a file of the pack [pack-artifact]"),
            ));
        }
        let got = sha256(&read(&dir.join(name))?);
        if &got != want {
            return Err(Error::verify(
                &label(name),
                format!("its sha256 is {got}, the manifest says {want} [pack-hash]"),
            ));
        }
    }
    let v = atom_file(&label(ATOM_FILE), &atoms)?;
    let map_bytes = read(&dir.join(&m.tokenizer))?;
    let map = SymbolMap::from_json(&label(&m.tokenizer), &map_bytes)?;
    let h = &v.header;
    let mismatch = |what: String| {
        Err(Error::verify(
            &label(MANIFEST_FILE),
            format!("{what} [pack-counts]"),
        ))
    };
    if map.vocab_size != h.vocab_size {
        return mismatch(format!(
            "the symbol map has {} ids, the atom file says {}",
            map.vocab_size, h.vocab_size
        ));
    }
    if m.atom_size != h.atom_size || m.atoms != h.atom_count || m.dtype != h.dtype.name() {
        return mismatch("atom_size, atoms or dtype differ from the atom file's header".to_owned());
    }
    if let Some(docs) = &v.documents {
        let real: u64 = docs.iter().map(|d| d.token_count).sum();
        if real != m.tokens || docs.len() as u64 != m.documents {
            return mismatch(format!(
                "the index holds {} documents of {real} tokens; the manifest says {} of {}",
                docs.len(),
                m.documents,
                m.tokens
            ));
        }
        check_padding(&label(ATOM_FILE), &atoms, h, docs, map.pad_id)?;
    }
    if m.artifacts.contains_key(SVG_FILE) {
        svg_file(&label(SVG_FILE), &read(&dir.join(SVG_FILE))?, &atoms, h)?;
    }
    Ok(m)
}

/// Every token after a document's real ones, to its last atom's end, is `pad_id`.
fn check_padding(
    label: &str,
    atoms: &[u8],
    h: &AtomHeader,
    docs: &[index::DocEntry],
    pad_id: u32,
) -> Result<()> {
    let size = usize::try_from(h.dtype.size()).unwrap_or(2);
    let id_at = |token: u64| -> u32 {
        let at = HEADER_LEN.saturating_add(
            usize::try_from(token)
                .unwrap_or(usize::MAX)
                .saturating_mul(size),
        );
        let b = atoms.get(at..at.saturating_add(size)).unwrap_or(&[]);
        match size {
            2 => u32::from(u16::from_le_bytes(b.try_into().unwrap_or([0; 2]))),
            _ => u32::from_le_bytes(b.try_into().unwrap_or([0; 4])),
        }
    };
    let per = u64::from(h.atom_size);
    for (i, d) in docs.iter().enumerate() {
        let start = d.first_atom.saturating_mul(per);
        let end = start.saturating_add(d.atom_count.saturating_mul(per));
        for t in start.saturating_add(d.token_count)..end {
            let id = id_at(t);
            if id != pad_id {
                return Err(Error::verify(
                    label,
                    format!("document {i}: token {t} pads with id {id}, not pad_id {pad_id} [atom-padding]"),
                ));
            }
        }
    }
    Ok(())
}
