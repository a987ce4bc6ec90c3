//! Reading tensors from other files for `zt pack`: safetensors, `.npy`,
//! `.npz`, GGUF and `.zt` of any version.

mod npy;
mod safetensors;

use std::borrow::Cow;
use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};
use zt_format::{Attributes, CborValue, DType, Data, Format, MappedFile, ReadOptions, ZtFile};

/// One object to be written.
#[derive(Debug)]
pub struct Item<'a> {
    pub name: String,
    /// Where the object sat in its input: used to order unlayered objects.
    pub position: u64,
    pub shape: Vec<u64>,
    pub format: Format,
    pub attributes: Attributes,
    pub components: Vec<ItemComponent<'a>>,
}

/// One component of an [`Item`], decoded and little-endian.
#[derive(Debug)]
pub struct ItemComponent<'a> {
    pub role: String,
    pub dtype: DType,
    pub logical_type: Option<String>,
    pub data: Cow<'a, [u8]>,
}

impl<'a> Item<'a> {
    fn dense(
        name: String,
        position: u64,
        shape: Vec<u64>,
        dtype: DType,
        logical: Option<&str>,
        data: Cow<'a, [u8]>,
    ) -> Self {
        Item {
            name,
            position,
            shape,
            format: Format::Dense,
            attributes: Attributes::new(),
            components: vec![ItemComponent {
                role: "data".to_owned(),
                dtype,
                logical_type: logical.map(str::to_owned),
                data,
            }],
        }
    }

    /// Decoded bytes of all components.
    pub fn byte_len(&self) -> u64 {
        self.components.iter().map(|c| c.data.len() as u64).sum()
    }
}

/// A loaded input file.
#[derive(Debug)]
pub enum Source {
    Safetensors(MappedFile),
    Npy {
        stem: String,
        bytes: MappedFile,
    },
    Npz(Vec<(String, Vec<u8>)>),
    /// A file the format core reads: `.zt` of any version, or GGUF
    /// (quantized tensors kept as `gguf_block` objects, tokenizer string
    /// arrays as ragged objects).
    Zt(Box<ZtFile>),
}

impl Source {
    /// Loads `path`, choosing the reader by extension.
    pub fn load(path: &Path, options: ReadOptions) -> Result<Source> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        let read = || MappedFile::open(path).with_context(|| format!("reading {}", path.display()));
        Ok(match ext {
            "safetensors" => Source::Safetensors(read()?),
            "npy" => Source::Npy {
                stem: path.file_stem().unwrap_or_default().to_string_lossy().into_owned(),
                bytes: read()?,
            },
            "npz" => Source::Npz(read_zip(path)?),
            "zt" | "gguf" => Source::Zt(Box::new(ZtFile::open_with(path, options)?)),
            other => bail!(
                "{}: unsupported input extension {other:?} (expected .safetensors, .npy, .npz, .gguf or .zt)",
                path.display()
            ),
        })
    }

    /// The objects in this input, and its file-level attributes.
    pub fn items(&self, label: &str) -> Result<(Vec<Item<'_>>, Attributes)> {
        match self {
            Source::Safetensors(bytes) => safetensors::items(label, bytes),
            Source::Npy { stem, bytes } => Ok((
                vec![npy::item(label, stem.clone(), 0, bytes)?],
                Attributes::new(),
            )),
            Source::Npz(entries) => {
                let items = entries
                    .iter()
                    .enumerate()
                    .map(|(i, (name, bytes))| {
                        let name = name.strip_suffix(".npy").unwrap_or(name).to_owned();
                        npy::item(&format!("{label}:{name}"), name, i as u64, bytes)
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok((items, Attributes::new()))
            }
            Source::Zt(file) => zt_items(file),
        }
    }
}

fn read_zip(path: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let f = zt_format::open_regular(path).with_context(|| format!("opening {}", path.display()))?;
    let mut zip = zip::ZipArchive::new(f)
        .with_context(|| format!("{}: not a zip archive", path.display()))?;
    let mut out = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i)?;
        let name = entry.name().to_owned();
        let mut buf = Vec::with_capacity(usize::try_from(entry.size()).unwrap_or(0).min(1 << 30));
        entry
            .read_to_end(&mut buf)
            .with_context(|| format!("{}: reading entry {name:?}", path.display()))?;
        out.push((name, buf));
    }
    Ok(out)
}

fn zt_items(file: &ZtFile) -> Result<(Vec<Item<'_>>, Attributes)> {
    let m = file.manifest();
    let mut items = Vec::with_capacity(m.objects.len());
    for (name, obj) in &m.objects {
        let mut components = Vec::with_capacity(obj.components.len());
        for (role, c) in &obj.components {
            let data = match file.read(name, role)? {
                Data::Borrowed(b) => Cow::Borrowed(b),
                Data::Owned(buf) => Cow::Owned(buf.as_slice().to_vec()),
            };
            components.push(ItemComponent {
                role: role.to_owned(),
                dtype: c.dtype,
                logical_type: c.logical_type.as_ref().map(|t| t.name().to_owned()),
                data,
            });
        }
        items.push(Item {
            name: name.to_owned(),
            position: obj.first_offset().unwrap_or(0),
            shape: obj.shape.clone(),
            format: obj.format.clone(),
            attributes: obj.attributes.clone(),
            components,
        });
    }
    Ok((items, m.attributes.clone()))
}

/// A text attribute value.
pub(crate) fn text(s: &str) -> CborValue {
    CborValue::Text(s.to_owned())
}
