//! The streaming, append-only writer: blobs at 64-byte boundaries with zero
//! padding, then the manifest, its size and the footer magic. It never seeks.

use std::collections::BTreeMap;
use std::io::Write;

use crate::aligned::ALIGNMENT;
use crate::codec;
use crate::component::{Component, Encoding};
use crate::components::Components;
use crate::container::MAGIC;
use crate::digest::DigestAlgorithm;
use crate::dtype::{DType, LogicalType};
use crate::error::{Error, Location, Result, Rule};
use crate::manifest::{Attributes, CborValue, Format, Manifest, Object};
use crate::validate::{self, BlobArea};

/// How to store a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// `Some(level)` compresses with zstd at that level.
    pub zstd_level: Option<i32>,
    /// The digest to record over the stored bytes, if any: one the
    /// format names (sha256, crc32c; blake3 is refused).
    pub digest: Option<DigestAlgorithm>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            zstd_level: None,
            digest: Some(DigestAlgorithm::Crc32c),
        }
    }
}

/// One component to write: its role, storage dtype, logical type and bytes
/// (little-endian, uncompressed).
#[derive(Debug, Clone, Copy)]
pub struct ComponentData<'a> {
    pub role: &'a str,
    pub dtype: DType,
    pub logical_type: Option<&'a str>,
    pub data: &'a [u8],
}

/// Writes a v1.2 file to any `Write`.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    pos: u64,
    label: String,
    manifest: Manifest,
    /// The objects written so far, in whatever order they come: the
    /// manifest's table is built from them once, at the end.
    objects: BTreeMap<String, Object>,
}

const ZEROS: [u8; ALIGNMENT as usize] = [0; ALIGNMENT as usize];

impl<W: Write> Writer<W> {
    /// Starts a file, writing the header magic. `label` names it in errors.
    pub fn new(mut out: W, label: &str) -> Result<Self> {
        let at = Location::file(label);
        out.write_all(MAGIC)
            .map_err(|e| Error::io(at, "writing header", e))?;
        Ok(Writer {
            out,
            pos: MAGIC.len() as u64,
            label: label.to_owned(),
            manifest: Manifest::new(),
            objects: BTreeMap::new(),
        })
    }

    /// Sets a file attribute.
    pub fn set_attribute(&mut self, key: &str, value: CborValue) {
        self.manifest.attributes.insert(key.to_owned(), value);
    }

    /// Adds a dense object with one `data` component.
    pub fn add_dense(
        &mut self,
        name: &str,
        shape: &[u64],
        dtype: DType,
        data: &[u8],
        store: StoreOptions,
    ) -> Result<()> {
        let c = ComponentData {
            role: "data",
            dtype,
            logical_type: None,
            data,
        };
        self.add_object(name, shape, &Format::Dense, Attributes::new(), &[c], store)
    }

    /// Adds a ragged (blob) `u8` object: one row per item of `rows`, for
    /// example a list of strings.
    pub fn add_ragged(&mut self, name: &str, rows: &[&[u8]], store: StoreOptions) -> Result<()> {
        let mut offsets = Vec::with_capacity(rows.len().saturating_add(1).saturating_mul(8));
        let mut values = Vec::new();
        offsets.extend_from_slice(&0u64.to_le_bytes());
        for r in rows {
            values.extend_from_slice(r);
            offsets.extend_from_slice(&(values.len() as u64).to_le_bytes());
        }
        let comps = [
            ComponentData {
                role: "offsets",
                dtype: DType::U64,
                logical_type: None,
                data: &offsets,
            },
            ComponentData {
                role: "values",
                dtype: DType::U8,
                logical_type: None,
                data: &values,
            },
        ];
        let shape = [rows.len() as u64];
        self.add_object(
            name,
            &shape,
            &Format::Ragged,
            Attributes::new(),
            &comps,
            store,
        )
    }

    /// Adds an object of any format. The object is validated before any of
    /// its bytes are written (a ragged object's offsets included).
    pub fn add_object(
        &mut self,
        name: &str,
        shape: &[u64],
        format: &Format,
        attributes: Attributes,
        components: &[ComponentData<'_>],
        store: StoreOptions,
    ) -> Result<()> {
        let at = Location::file(&self.label);
        if let Some(algorithm) = store.digest.filter(|a| !a.in_zt_files()) {
            let rule = Rule::DigestNotInFormat {
                algorithm: algorithm.name(),
            };
            return Err(Error::invalid(at.object(name), rule));
        }
        if self.objects.contains_key(name) {
            return Err(Error::invalid(
                at.object(name),
                Rule::DuplicateKey {
                    key: name.to_owned(),
                    context: "objects".to_owned(),
                },
            ));
        }
        if *format == Format::Ragged {
            let offsets = components.iter().find(|c| c.role == "offsets");
            let values = components.iter().find(|c| c.role == "values");
            if let (Some(o), Some(v)) = (offsets, values) {
                let count = (v.data.len() as u64)
                    .checked_div(v.dtype.size())
                    .unwrap_or(0);
                crate::ragged::check_offsets(o.data, count)
                    .map_err(|rule| Error::invalid(at.component(name, "offsets"), rule))?;
            }
        }
        // Build the object with provisional offsets to validate it first.
        let mut obj = Object {
            shape: shape.to_vec(),
            format: format.clone(),
            attributes,
            components: Components::new(),
        };
        for c in components {
            if obj.components.contains_key(c.role) {
                return Err(Error::invalid(
                    at.object(name),
                    Rule::DuplicateKey {
                        key: c.role.to_owned(),
                        context: "components".to_owned(),
                    },
                ));
            }
            obj.components.insert(
                c.role.to_owned(),
                Component::raw(
                    c.dtype,
                    c.logical_type.map(LogicalType::parse),
                    0,
                    c.data.len() as u64,
                ),
            );
        }
        validate::object(name, &obj, &at, false)?;
        for c in components {
            let stored_owned;
            let (stored, encoding, unc) = match store.zstd_level {
                Some(level) => {
                    stored_owned = codec::compress(c.data, level)
                        .map_err(|e| Error::io(at.component(name, c.role), "compressing", e))?;
                    (&stored_owned[..], Encoding::Zstd, Some(c.data.len() as u64))
                }
                None => (c.data, Encoding::Raw, None),
            };
            let offset = self.write_blob(stored, &at.component(name, c.role))?;
            if let Some(comp) = obj.components.get_mut(c.role) {
                comp.offset = offset;
                comp.length = stored.len() as u64;
                comp.encoding = encoding;
                comp.uncompressed_length = unc;
                comp.digest = store.digest.map(|a| a.digest(stored));
            }
        }
        self.objects.insert(name.to_owned(), obj);
        Ok(())
    }

    fn write_blob(&mut self, stored: &[u8], at: &Location) -> Result<u64> {
        let pad = self
            .pos
            .next_multiple_of(ALIGNMENT)
            .saturating_sub(self.pos);
        let io = |e| Error::io(at.clone(), "writing blob", e);
        self.out
            .write_all(ZEROS.get(..pad as usize).unwrap_or_default())
            .map_err(io)?;
        let offset = self.pos.saturating_add(pad);
        self.out.write_all(stored).map_err(io)?;
        self.pos = offset.saturating_add(stored.len() as u64);
        Ok(offset)
    }

    /// Writes the manifest and footer and returns the output.
    pub fn finish(mut self) -> Result<W> {
        let at = Location::file(&self.label);
        self.manifest.objects = std::mem::take(&mut self.objects).into_iter().collect();
        let area = BlobArea {
            start: MAGIC.len() as u64,
            end: self.pos,
        };
        validate::manifest(&self.manifest, area, &at, &mut Vec::new())?;
        let io = |e| Error::io(at.clone(), "writing manifest", e);
        self.out
            .write_all(&crate::layout::tail(&self.manifest))
            .map_err(io)?;
        self.out.flush().map_err(io)?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file carries only the digests the format names: a blake3 one is
    /// refused by name before any byte is written.
    #[test]
    fn digests_the_format_does_not_name_are_refused() {
        let mut w = Writer::new(Vec::new(), "t.zt").unwrap();
        let store = |digest| StoreOptions {
            zstd_level: None,
            digest: Some(digest),
        };
        let blake3 = store(DigestAlgorithm::Blake3);
        let e = w.add_dense("a", &[4], DType::U8, &[1, 2, 3, 4], blake3);
        let e = e.unwrap_err();
        assert_eq!(e.rule().unwrap().name(), "digest-not-in-format");
        assert!(e.to_string().contains("\"blake3\""), "{e}");
        for ok in [DigestAlgorithm::Sha256, DigestAlgorithm::Crc32c] {
            let name = ok.name();
            w.add_dense(name, &[4], DType::U8, &[1, 2, 3, 4], store(ok))
                .unwrap();
        }
        let file = w.finish().unwrap();
        let f = crate::ZtFile::from_bytes("t.zt", &file, Default::default()).unwrap();
        assert_eq!(f.manifest().objects.len(), 2);
    }
}
