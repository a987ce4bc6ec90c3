//! `zt ingest pack`: inputs cleaned, tokenized and packed into an ingest
//! pack (seed 002 section 6), a directory of
//!
//! - `matrix_atoms.bin`: the atoms, one document after another, each
//!   starting on an atom boundary, with the document index (flag bit 1);
//! - `pi_symbol_map.json`: the symbol map, as given;
//! - `atoms.svgt`: the SVG-Tensor projection, with `--svg ROWSxCOLS`;
//! - `ingest_manifest.json`: the seed's fields (`hash` is the sha256 of
//!   `matrix_atoms.bin`), plus `artifacts` (every other file's sha256),
//!   `tokens` (real tokens, before padding), `atoms`, `documents` and
//!   `inputs`.
//!
//! The pack is written into a hidden temporary directory beside `out`
//! and renamed into place only when complete; `out` must not exist.

use std::path::{Path, PathBuf};

use zt_format::atoms::ingest::{
    sha256, IngestManifest, ATOM_FILE, MANIFEST_FILE, MAP_FILE, SVG_FILE,
};
use zt_format::atoms::pack::{PackOptions, Packer};
use zt_format::atoms::svg_tensor::SvgHeader;
use zt_format::atoms::symbols::SymbolMap;
use zt_format::atoms::AtomDtype;

use crate::clean::{clean, Kind};
use crate::error::{Error, Result};
use crate::tokenize::Tokenizer;

/// What to pack.
#[derive(Debug, Clone)]
pub struct PackRequest {
    pub inputs: Vec<PathBuf>,
    pub tokenizer: PathBuf,
    pub atom_size: u32,
    /// `None`: u16 when the vocabulary fits, else u32.
    pub dtype: Option<AtomDtype>,
    /// `--svg ROWSxCOLS`.
    pub svg: Option<(u16, u16)>,
    pub out: PathBuf,
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(&path.display().to_string(), "reading", e))
}

/// Packs `req`; `progress(done, total)` after each input. Returns the
/// manifest written.
pub fn pack(req: &PackRequest, progress: &mut dyn FnMut(usize, usize)) -> Result<IngestManifest> {
    let out_label = req.out.display().to_string();
    if req.out.exists() {
        return Err(Error::input(
            &out_label,
            "already exists; choose a new directory",
        ));
    }
    let map_label = req.tokenizer.display().to_string();
    let map_json = read(&req.tokenizer)?;
    let map = SymbolMap::from_json(&map_label, &map_json)?;
    let tokenizer = Tokenizer::new(&map);
    let dtype = req
        .dtype
        .unwrap_or_else(|| AtomDtype::for_vocab(u64::from(map.vocab_size)));
    let options = PackOptions {
        atom_size: req.atom_size,
        dtype,
        vocab_size: map.vocab_size,
        pad_id: map.pad_id,
        index: true,
        svg_tensor: req.svg.is_some(),
    };
    let mut packer = Packer::new(options).map_err(|source| Error::Pack {
        file: out_label.clone(),
        source,
    })?;
    let mut inputs = Vec::new();
    for (i, input) in req.inputs.iter().enumerate() {
        let label = input.display().to_string();
        let kind = Kind::of(input).ok_or_else(|| {
            Error::input(&label, "unknown kind of input (.txt, .json, .html, .md)")
        })?;
        let text = clean(&label, kind, &read(input)?)?;
        packer
            .push(&tokenizer.tokenize(&text))
            .map_err(|source| Error::Pack {
                file: label.clone(),
                source,
            })?;
        inputs.push(
            input
                .file_name()
                .map_or(label.clone(), |n| n.to_string_lossy().into_owned()),
        );
        progress(i + 1, req.inputs.len());
    }
    let packed = packer.finish();
    let mut files: Vec<(&str, Vec<u8>)> = vec![(MAP_FILE, map_json)];
    if let Some((rows, cols)) = req.svg {
        let h = SvgHeader::for_atoms(&packed.header, rows, cols)
            .map_err(|r| Error::input(&out_label, r.to_string()))?;
        let payload_len = usize::try_from(packed.header.payload_len().unwrap_or(0)).unwrap_or(0);
        let payload = packed.bytes.get(64..64 + payload_len).unwrap_or(&[]);
        let mut svgt = h.encode().to_vec();
        svgt.extend_from_slice(payload);
        files.push((SVG_FILE, svgt));
    }
    let manifest = IngestManifest {
        version: 1,
        source: common_parent(&req.inputs),
        tokenizer: MAP_FILE.to_owned(),
        atom_file: ATOM_FILE.to_owned(),
        atom_size: req.atom_size,
        dtype: dtype.name().to_owned(),
        hash: sha256(&packed.bytes),
        artifacts: files
            .iter()
            .map(|(n, b)| ((*n).to_owned(), sha256(b)))
            .collect(),
        tokens: packed.real_tokens,
        atoms: packed.header.atom_count,
        documents: packed.documents.len() as u64,
        inputs,
    };
    let mut manifest_json = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    manifest_json.push(b'\n');
    files.push((ATOM_FILE, packed.bytes));
    files.push((MANIFEST_FILE, manifest_json));
    write_dir(&req.out, &files)?;
    Ok(manifest)
}

/// The directory the inputs share (what the seed's `source` names).
fn common_parent(inputs: &[PathBuf]) -> String {
    let mut parents = inputs.iter().filter_map(|p| p.parent());
    let Some(first) = parents.next() else {
        return String::new();
    };
    let mut common = first.to_path_buf();
    for p in parents {
        while !p.starts_with(&common) {
            if !common.pop() {
                return String::new();
            }
        }
    }
    common.display().to_string()
}

/// Writes `files` into a temporary directory beside `out`, then renames it to `out`.
fn write_dir(out: &Path, files: &[(&str, Vec<u8>)]) -> Result<()> {
    let label = out.display().to_string();
    let tmp = zt_format::temp_path(out);
    let result = (|| {
        std::fs::create_dir(&tmp)
            .map_err(|e| Error::io(&label, "creating the temporary directory", e))?;
        for (name, bytes) in files {
            let path = tmp.join(name);
            std::fs::write(&path, bytes).map_err(|e| Error::io(&label, "writing the pack", e))?;
            std::fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::io(&label, "flushing the pack", e))?;
        }
        std::fs::rename(&tmp, out).map_err(|e| Error::io(&label, "renaming the pack into place", e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result
}
