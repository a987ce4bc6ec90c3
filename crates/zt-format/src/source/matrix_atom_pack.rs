//! An ingest pack as a server serves it: one entry at the path of its
//! `ingest_manifest.json` (source `matrix-atom-pack`), whose manifest
//! joins the pack's files, as a sharded checkpoint's index
//! (`safetensors_index.rs`) joins its shards.
//!
//! - The atom file (`atoms`, `documents`) and its SVG-Tensor projection
//!   (`grids`) stay entries of their own; the pack's components name them
//!   in `file`, as a sharded checkpoint's components name its shards, so
//!   their bytes, digests and checks are the member entries'.
//! - The symbol map is not a tensor file: it is read when the pack is
//!   found, checked against its sha256 in `artifacts`, and served from
//!   memory as two objects: `symbols`, ragged `u8`, whose row `i` is the
//!   text of id `i` (empty for an id the map does not name), and
//!   `symbol_map`, the map's JSON as stored (`u8`, `[bytes]`).
//! - The pack's attributes are the atom file's (`matrix_atom.*`), its
//!   projection's (`svg_tensor.*`) and the ingest manifest's (`ingest.*`).
//!
//! Each error names the file at fault and the rule, in brackets.

use std::collections::BTreeMap;

use crate::atoms::ingest::{sha256, IngestManifest, PackFileError, SVG_FILE};
use crate::atoms::symbols::SymbolMap;
use crate::container::Synthesized;
use crate::{CborValue, Component, Components, DType, FilePart, Format, Manifest, Object, Source};

type Result<T> = std::result::Result<T, PackFileError>;

/// A pack's manifest and symbol map, read and checked.
#[derive(Debug, Clone)]
pub struct ServedPack {
    pub ingest: IngestManifest,
    map: SymbolMap,
    map_json: Vec<u8>,
}

/// One of the pack's files as its own entry serves it.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    pub manifest: &'a Manifest,
    pub part: &'a FilePart,
}

/// `name`, a file of the pack whose manifest is `label`, labelled the same way.
pub fn beside(label: &str, name: &str) -> String {
    match label.rsplit_once('/') {
        Some((dir, _)) => format!("{dir}/{name}"),
        None => name.to_owned(),
    }
}

/// A plain file name: no directory, nothing hidden behind `..`.
fn plain(name: &str) -> bool {
    !name.is_empty() && !name.contains(['/', '\\', '\0']) && name != "." && name != ".."
}

impl ServedPack {
    /// Reads an ingest manifest (`label` names it); its `tokenizer` is
    /// the map to read next.
    pub fn read_manifest(label: &str, json: &[u8]) -> Result<IngestManifest> {
        let m: IngestManifest = serde_json::from_slice(json).map_err(|e| {
            PackFileError::new(
                label,
                format!("not an ingest manifest: {e} [pack-manifest]"),
            )
        })?;
        let names = [&m.atom_file, &m.tokenizer]
            .into_iter()
            .chain(m.artifacts.keys());
        for name in names {
            if !plain(name) {
                return Err(PackFileError::new(
                    label,
                    format!("{name:?} is not a file name in the pack's directory [pack-artifact]"),
                ));
            }
        }
        if !m.artifacts.contains_key(&m.tokenizer) {
            return Err(PackFileError::new(
                label,
                format!(
                    "artifacts gives no sha256 for the symbol map {:?} [pack-artifact]",
                    m.tokenizer
                ),
            ));
        }
        Ok(m)
    }

    /// The pack of `ingest` (read from `label`) with its symbol map
    /// `map_json`, which must have the sha256 `artifacts` gives it. The
    /// symbols are served as a ragged object of `vocab_size` rows, whose
    /// offsets (8 bytes a row) may hold at most `cap` bytes.
    pub fn new(
        label: &str,
        ingest: IngestManifest,
        map_json: Vec<u8>,
        cap: u64,
    ) -> Result<ServedPack> {
        let map_label = beside(label, &ingest.tokenizer);
        let want = ingest.artifacts.get(&ingest.tokenizer);
        let got = sha256(&map_json);
        if want != Some(&got) {
            return Err(PackFileError::new(
                &map_label,
                // The hash it has stays unsaid: the pack may name any
                // file under the root, and its reason is shown to clients.
                format!(
                    "its sha256 is not the one {label} gives ({}) [pack-hash]",
                    want.map_or("none", String::as_str)
                ),
            ));
        }
        let map = SymbolMap::from_json(&map_label, &map_json)?;
        let offsets = (u64::from(map.vocab_size) + 1).saturating_mul(8);
        if offsets > cap {
            return Err(PackFileError::new(
                &map_label,
                format!(
                    "vocab_size {} needs {offsets} bytes of symbol offsets, over the cap of {cap} [pack-symbols-size]",
                    map.vocab_size
                ),
            ));
        }
        Ok(ServedPack {
            ingest,
            map,
            map_json,
        })
    }

    /// The pack's files served as entries of their own: the atom file,
    /// and the SVG-Tensor projection when the pack has one.
    pub fn members(&self) -> Vec<&str> {
        let mut names = vec![self.ingest.atom_file.as_str()];
        if self.ingest.artifacts.contains_key(SVG_FILE) {
            names.push(SVG_FILE);
        }
        names
    }

    /// The pack's manifest, given its members (by file name, each as its
    /// entry serves it), and the bytes of its synthesized components.
    pub fn merge(
        &self,
        label: &str,
        members: &BTreeMap<String, Member<'_>>,
    ) -> Result<(Manifest, Synthesized)> {
        let ingest = &self.ingest;
        let member = |name: &str| {
            members.get(name).ok_or_else(|| {
                PackFileError::new(
                    &beside(label, name),
                    "is not served [pack-member]".to_owned(),
                )
            })
        };
        let counts = |name: &str, what: String| {
            PackFileError::new(
                &beside(label, name),
                format!("{what}, {label} disagrees [pack-counts]"),
            )
        };
        let atoms = member(&ingest.atom_file)?;
        let h = super::atom_header(atoms.manifest)
            .filter(|_| atoms.manifest.source == Source::MatrixAtom)
            .ok_or_else(|| {
                PackFileError::new(
                    &beside(label, &ingest.atom_file),
                    "is not a MATRIX-ATOM file [pack-member]".to_owned(),
                )
            })?;
        if h.atom_size != ingest.atom_size
            || h.atom_count != ingest.atoms
            || h.dtype.name() != ingest.dtype
        {
            return Err(counts(
                &ingest.atom_file,
                format!(
                    "its header says {} atoms of {} {} tokens",
                    h.atom_count,
                    h.atom_size,
                    h.dtype.name()
                ),
            ));
        }
        if h.vocab_size != self.map.vocab_size {
            return Err(counts(
                &ingest.tokenizer,
                format!(
                    "its vocab_size is {}, the atom file's {}",
                    self.map.vocab_size, h.vocab_size
                ),
            ));
        }
        let mut m = Manifest {
            source: Source::MatrixAtomPack,
            attributes: atoms.manifest.attributes.clone(),
            ..Manifest::new()
        };
        for name in self.members() {
            let part = member(name)?;
            if name != ingest.atom_file {
                let grids = part.manifest.objects.get("grids");
                if grids.and_then(|g| g.shape.first()) != Some(&h.atom_count) {
                    return Err(counts(
                        name,
                        "its grids are not one per atom of the atom file".to_owned(),
                    ));
                }
                m.attributes.extend(part.manifest.attributes.clone());
            }
            let file: std::sync::Arc<str> = std::sync::Arc::from(name);
            for (object, obj) in &part.manifest.objects {
                let mut obj = obj.clone();
                for (_, c) in obj.components.iter_mut() {
                    c.file = Some(std::sync::Arc::clone(&file));
                }
                m.objects.insert(object, obj);
            }
            m.files.insert(name.to_owned(), part.part.clone());
        }
        let text = |s: &str| CborValue::Text(s.to_owned());
        let int = |v: u64| CborValue::Integer(v.into());
        let inputs = ingest.inputs.iter().map(|i| text(i)).collect();
        for (k, v) in [
            ("ingest.version", int(u64::from(ingest.version))),
            ("ingest.source", text(&ingest.source)),
            ("ingest.tokenizer", text(&ingest.tokenizer)),
            ("ingest.atom_file", text(&ingest.atom_file)),
            ("ingest.hash", text(&ingest.hash)),
            ("ingest.tokens", int(ingest.tokens)),
            ("ingest.documents", int(ingest.documents)),
            ("ingest.inputs", CborValue::Array(inputs)),
        ] {
            m.attributes.insert(k.to_owned(), v);
        }
        let mut synthesized = Synthesized::new();
        let (offsets, values) = self.symbol_rows();
        let mut built =
            |object: &str, format: Format, shape: u64, parts: Vec<(&str, DType, Vec<u8>)>| {
                let mut components = Components::new();
                for (role, dtype, bytes) in parts {
                    components.insert(role.to_owned(), Component::built(dtype, &bytes));
                    synthesized.insert((object.to_owned(), role.to_owned()), bytes);
                }
                let obj = Object {
                    shape: vec![shape],
                    format,
                    attributes: Default::default(),
                    components,
                };
                m.objects.insert(object.to_owned(), obj);
            };
        built(
            "symbols",
            Format::Ragged,
            u64::from(self.map.vocab_size),
            vec![
                ("offsets", DType::U64, offsets),
                ("values", DType::U8, values),
            ],
        );
        built(
            "symbol_map",
            Format::Dense,
            self.map_json.len() as u64,
            vec![("data", DType::U8, self.map_json.clone())],
        );
        Ok((m, synthesized))
    }

    /// The symbols as a ragged object's components: `vocab_size + 1`
    /// little-endian `u64` offsets, and the texts, row `i` id `i`'s.
    fn symbol_rows(&self) -> (Vec<u8>, Vec<u8>) {
        let rows = usize::try_from(self.map.vocab_size).unwrap_or(0);
        let mut texts: Vec<&str> = vec![""; rows];
        for s in &self.map.symbols {
            if let Some(t) = usize::try_from(s.id).ok().and_then(|i| texts.get_mut(i)) {
                *t = &s.text;
            }
        }
        let mut offsets = Vec::with_capacity(rows.saturating_add(1).saturating_mul(8));
        let mut values = Vec::new();
        offsets.extend_from_slice(&0u64.to_le_bytes());
        for t in texts {
            values.extend_from_slice(t.as_bytes());
            offsets.extend_from_slice(&(values.len() as u64).to_le_bytes());
        }
        (offsets, values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atoms::ingest::MAP_FILE;

    const MAP: &str = r#"{"version":1,"vocab_size":4,"unk_id":0,"pad_id":0,"byte_fallback":false,"symbols":[{"id":1,"text":"a"},{"id":3,"text":"ccc"}]}"#;

    fn manifest(map_hash: &str, atom_file: &str) -> Vec<u8> {
        serde_json::json!({
            "version": 1, "source": "", "tokenizer": MAP_FILE, "atom_file": atom_file,
            "atom_size": 2, "dtype": "uint16", "hash": "sha256:00",
            "artifacts": { MAP_FILE: map_hash }, "tokens": 0, "atoms": 0,
            "documents": 0, "inputs": [],
        })
        .to_string()
        .into_bytes()
    }

    fn rule(e: PackFileError) -> String {
        let s = e.to_string();
        s.rsplit_once('[')
            .map(|(_, r)| r.trim_end_matches(']').to_owned())
            .unwrap_or(s)
    }

    #[test]
    fn a_pack_is_read_by_its_rules() {
        let good = sha256(MAP.as_bytes());
        let m = ServedPack::read_manifest(
            "p/ingest_manifest.json",
            &manifest(&good, "matrix_atoms.bin"),
        )
        .unwrap();
        let p = ServedPack::new(
            "p/ingest_manifest.json",
            m.clone(),
            MAP.as_bytes().to_vec(),
            1 << 20,
        )
        .unwrap();
        let (offsets, values) = p.symbol_rows();
        let offsets: Vec<u64> = offsets
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        assert_eq!((offsets, values), (vec![0, 0, 1, 1, 4], b"accc".to_vec()));
        assert_eq!(p.members(), ["matrix_atoms.bin"]);

        let bad = |r: Result<ServedPack>| rule(r.unwrap_err());
        let read = |json: Vec<u8>| ServedPack::read_manifest("m", &json).map(|_| unreachable!());
        assert_eq!(bad(read(manifest(&good, "../x.bin"))), "pack-artifact");
        assert_eq!(bad(read(b"[]".to_vec())), "pack-manifest");
        let e = bad(ServedPack::new("p/m", m.clone(), b"{}".to_vec(), 1 << 20));
        assert_eq!(e, "pack-hash");
        let e = bad(ServedPack::new("p/m", m, MAP.as_bytes().to_vec(), 39));
        assert_eq!(e, "pack-symbols-size");
        let missing = p.merge("p/m", &BTreeMap::new()).unwrap_err();
        assert!(
            missing.to_string().contains("p/matrix_atoms.bin"),
            "{missing}"
        );
        assert_eq!(rule(missing), "pack-member");
    }
}
