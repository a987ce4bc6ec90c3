//! Opening files and reading components: zero-copy where the bytes can be
//! used in place, verified on first access unless the caller opts out.

use std::borrow::Cow;
use std::io::Read;
use std::path::Path;
use std::sync::OnceLock;

use memmap2::Mmap;

use crate::aligned::{AlignedBuf, ALIGNMENT};
use crate::codec;
use crate::component::{Component, Encoding};
use crate::container::{self, Parsed};
use crate::digest::DigestAlgorithm;
use crate::element::{Data, Tensor};
use crate::error::{Error, Location, Result, Rule};
use crate::manifest::{Format, Manifest, Object, Source};
use crate::options::{ReadOptions, Verify};
use crate::warning::Warning;

enum Backing {
    Map(Mmap),
    Buf(AlignedBuf),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Buf(b) => b.as_slice(),
        }
    }
}

/// How one component fared in [`ZtFile::verify`].
#[derive(Debug)]
pub enum ComponentStatus {
    /// The digest matched (and zstd data decoded to its stated length).
    Verified(DigestAlgorithm),
    /// No digest was recorded; the structure checked out.
    NoDigest,
    /// The data is wrong.
    Failed(Error),
    /// The data could not be checked (an unknown digest algorithm).
    Unverifiable(Error),
}

/// One row of a verification report.
#[derive(Debug)]
pub struct ComponentReport {
    pub object: String,
    pub component: String,
    pub status: ComponentStatus,
}

/// An open `.zt` file of any supported version.
pub struct ZtFile {
    label: String,
    backing: Backing,
    parsed: Parsed,
    options: ReadOptions,
    /// Digest results by component slot, filled on first access.
    checks: Vec<OnceLock<Result<(), Rule>>>,
}

impl std::fmt::Debug for ZtFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZtFile")
            .field("label", &self.label)
            .field("size", &self.backing.bytes().len())
            .field("objects", &self.parsed.manifest.objects.len())
            .finish()
    }
}

impl ZtFile {
    /// Opens a file by path through mmap, with default options (digests verified).
    ///
    /// The file must not be truncated while it is open: see the SIGBUS note
    /// in the crate docs. Files replaced by rename are safe.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, ReadOptions::default())
    }

    /// Opens a file by path with explicit options; its name says its
    /// source (`.safetensors`, `.gguf`, ...; `.zt` when it names none).
    pub fn open_with(path: impl AsRef<Path>, options: ReadOptions) -> Result<Self> {
        Self::open_source(path, None, options)
    }

    /// Opens a file by path as a file of `source`, whatever its name says
    /// (a copy still named `*.part`).
    pub fn open_as(path: impl AsRef<Path>, source: Source, options: ReadOptions) -> Result<Self> {
        Self::open_source(path, Some(source), options)
    }

    fn open_source(
        path: impl AsRef<Path>,
        source: Option<Source>,
        options: ReadOptions,
    ) -> Result<Self> {
        let path = path.as_ref();
        let label = path.display().to_string();
        let at = Location::file(&label);
        let mut file =
            crate::open_regular(path).map_err(|e| Error::io(at.clone(), "opening file", e))?;
        let size = file
            .metadata()
            .map_err(|e| Error::io(at.clone(), "reading file metadata", e))?
            .len();
        // Tiny files are read; mapping them buys nothing.
        let backing = if size < 4096 {
            let mut v = Vec::new();
            file.read_to_end(&mut v)
                .map_err(|e| Error::io(at.clone(), "reading file", e))?;
            Backing::Buf(AlignedBuf::copy_from(&v).map_err(|r| Error::invalid(at.clone(), r))?)
        } else {
            Backing::Map(crate::mmap::map(&file).map_err(|e| Error::io(at, "mapping file", e))?)
        };
        Self::with_backing(label, backing, options, source)
    }

    /// Reads a file held in an aligned buffer. `label` names it in errors.
    pub fn from_buffer(label: &str, buf: AlignedBuf, options: ReadOptions) -> Result<Self> {
        Self::with_backing(label.to_owned(), Backing::Buf(buf), options, None)
    }

    /// Copies `bytes` into an aligned buffer and reads it.
    pub fn from_bytes(label: &str, bytes: &[u8], options: ReadOptions) -> Result<Self> {
        let buf =
            AlignedBuf::copy_from(bytes).map_err(|r| Error::invalid(Location::file(label), r))?;
        Self::from_buffer(label, buf, options)
    }

    fn with_backing(
        label: String,
        backing: Backing,
        options: ReadOptions,
        source: Option<Source>,
    ) -> Result<Self> {
        // The file's name says its source, as it does for the server,
        // unless the caller says.
        let mut parsed = match source.or_else(|| crate::source::by_name(&label)) {
            Some(crate::Source::Zt) | None => {
                container::parse(&label, backing.bytes(), &options.limits)?
            }
            Some(other) => {
                crate::source::parse(other, &label, backing.bytes(), &options.limits)?.parsed
            }
        };
        let mut n = 0usize;
        for obj in parsed.manifest.objects.values_mut() {
            for (_, c) in obj.components.iter_mut() {
                c.slot = u32::try_from(n).unwrap_or(u32::MAX);
                n = n.saturating_add(1);
            }
        }
        let checks = (0..n).map(|_| OnceLock::new()).collect();
        Ok(ZtFile {
            label,
            backing,
            parsed,
            options,
            checks,
        })
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn manifest(&self) -> &Manifest {
        &self.parsed.manifest
    }

    /// The manifest's place in the file and the blob area.
    pub fn parsed(&self) -> &Parsed {
        &self.parsed
    }

    pub fn warnings(&self) -> &[Warning] {
        &self.parsed.warnings
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    fn at(&self, object: &str, role: &str) -> Location {
        Location::file(&self.label).component(object, role)
    }

    /// Looks up an object by name.
    pub fn object(&self, name: &str) -> Result<&Object> {
        self.parsed.manifest.objects.get(name).ok_or_else(|| {
            Error::invalid(
                Location::file(&self.label),
                Rule::NoSuchObject {
                    name: name.to_owned(),
                },
            )
        })
    }

    fn lookup(&self, object: &str, role: &str) -> Result<(&Object, &Component, usize)> {
        let obj = self.object(object)?;
        let comp = obj.components.get(role).ok_or_else(|| {
            Error::invalid(
                Location::file(&self.label).object(object),
                Rule::NoSuchComponent {
                    role: role.to_owned(),
                },
            )
        })?;
        Ok((obj, comp, comp.slot as usize))
    }

    fn raw_slice(&self, c: &Component) -> &[u8] {
        let start = usize::try_from(c.offset).unwrap_or(usize::MAX);
        let end = start.saturating_add(usize::try_from(c.length).unwrap_or(usize::MAX));
        // Validation proved the range lies inside the file.
        self.bytes().get(start..end).unwrap_or_default()
    }

    fn check_digest(&self, c: &Component, slot: usize, stored: &[u8]) -> Result<(), Rule> {
        let Some(d) = &c.digest else { return Ok(()) };
        let verify = self.options.verify;
        if verify == Verify::Skip {
            return Ok(());
        }
        if d.algorithm().is_none() && verify == Verify::AllowUnknownAlgorithms {
            return Ok(());
        }
        match self.checks.get(slot) {
            Some(cell) => cell.get_or_init(|| d.check(stored)).clone(),
            None => d.check(stored),
        }
    }

    /// The component's stored bytes (compressed for zstd), checked against
    /// its digest on first access.
    pub fn stored(&self, object: &str, role: &str) -> Result<&[u8]> {
        let (_, c, slot) = self.lookup(object, role)?;
        self.stored_of(object, role, c, slot)
    }

    /// The stored bytes, before any check: a range of the file, or for a
    /// synthesized component (a GGUF string array) the bytes built from
    /// the header.
    fn stored_unchecked(&self, object: &str, role: &str, c: &Component) -> &[u8] {
        if c.synthesized {
            let key = (object.to_owned(), role.to_owned());
            self.parsed
                .synthesized
                .get(&key)
                .map_or(&[][..], Vec::as_slice)
        } else {
            self.raw_slice(c)
        }
    }

    fn stored_of(&self, object: &str, role: &str, c: &Component, slot: usize) -> Result<&[u8]> {
        let stored = self.stored_unchecked(object, role, c);
        self.check_digest(c, slot, stored)
            .map_err(|r| Error::invalid(self.at(object, role), r))?;
        Ok(stored)
    }

    /// The component's decoded bytes (decompressed, legacy transformations
    /// applied), 64-byte aligned; borrowed from the file when possible.
    pub fn read(&self, object: &str, role: &str) -> Result<Data<'_>> {
        let (obj, c, slot) = self.lookup(object, role)?;
        self.read_of(object, role, obj, c, slot)
    }

    fn read_of(
        &self,
        object: &str,
        role: &str,
        obj: &Object,
        c: &Component,
        slot: usize,
    ) -> Result<Data<'_>> {
        let stored = self.stored_of(object, role, c, slot)?;
        if obj.format == Format::Ragged && role == "offsets" {
            let decoded = self.decode(object, role, obj, c, stored)?;
            self.ragged_offsets(object, obj, &decoded)
                .map_err(|r| Error::invalid(self.at(object, role), r))?;
            return Ok(decoded);
        }
        self.decode(object, role, obj, c, stored)
    }

    /// The positions in a ragged object's decoded `offsets`, against the
    /// number of elements its `values` holds.
    fn ragged_offsets(&self, _object: &str, obj: &Object, offsets: &[u8]) -> Result<(), Rule> {
        let count = obj
            .components
            .get("values")
            .and_then(|v| v.decoded_length()?.checked_div(v.dtype.size()))
            .unwrap_or(0);
        crate::ragged::check_offsets(offsets, count)
    }

    fn decode<'s>(
        &'s self,
        object: &str,
        role: &str,
        obj: &Object,
        c: &Component,
        stored: &'s [u8],
    ) -> Result<Data<'s>> {
        if c.encoding == Encoding::Raw
            && c.legacy.is_none()
            && stored.as_ptr() as u64 % ALIGNMENT == 0
        {
            return Ok(Data::Borrowed(stored));
        }
        let inv = |r| Error::invalid(self.at(object, role), r);
        let decoded = match c.encoding {
            Encoding::Raw => Data::Borrowed(stored),
            Encoding::Zstd => {
                let expected = match (c.legacy.is_some(), c.uncompressed_length) {
                    (false, Some(n)) => n,
                    (true, _) | (false, None) => codec::frame_content_size(stored)
                        .or(c.uncompressed_length)
                        .ok_or_else(|| inv(Rule::ZstdWithoutLength))?,
                };
                Data::Owned(
                    codec::decompress(stored, expected, self.options.limits.decompress_cap)
                        .map_err(inv)?,
                )
            }
        };
        match &c.legacy {
            Some(extract) => Ok(Data::Owned(
                extract.apply(&decoded, &obj.shape).map_err(inv)?,
            )),
            None => match decoded {
                // Misaligned legacy data: copy into an aligned buffer.
                Data::Borrowed(b) => Ok(Data::Owned(AlignedBuf::copy_from(b).map_err(inv)?)),
                owned => Ok(owned),
            },
        }
    }

    /// Reads a component as a typed tensor. Dense `data` gets the object's
    /// shape; other components are one-dimensional.
    pub fn component_tensor(&self, object: &str, role: &str) -> Result<Tensor<'_>> {
        let (obj, c, slot) = self.lookup(object, role)?;
        let data = self.read_of(object, role, obj, c, slot)?;
        let shape = if role == "data" {
            Cow::Borrowed(obj.shape.as_slice())
        } else {
            Cow::Owned(vec![(data.len() as u64)
                .checked_div(c.dtype.size())
                .unwrap_or(0)])
        };
        Ok(Tensor {
            data,
            dtype: c.dtype,
            logical_type: c.logical_type.clone(),
            shape,
        })
    }

    /// Reads a dense object's `data` as a typed tensor.
    pub fn tensor(&self, object: &str) -> Result<Tensor<'_>> {
        self.component_tensor(object, "data")
    }

    /// Checks every component: its digest, and that zstd data decodes to its
    /// stated length. Nothing is allocated past the caps: zstd output is
    /// counted, not kept.
    pub fn verify(&self) -> Vec<ComponentReport> {
        self.parsed
            .manifest
            .components()
            .map(|(o, r, c)| ComponentReport {
                object: o.to_owned(),
                component: r.to_owned(),
                status: self.verify_one(o, r, c),
            })
            .collect()
    }

    fn verify_one(&self, object: &str, role: &str, c: &Component) -> ComponentStatus {
        let at = self.at(object, role);
        let stored = self.stored_unchecked(object, role, c);
        let result = match &c.digest {
            Some(d) => d.check(stored),
            None => Ok(()),
        };
        if let Err(rule) = result {
            let unverifiable = rule.is_unverifiable();
            let e = Error::invalid(at, rule);
            return if unverifiable {
                ComponentStatus::Unverifiable(e)
            } else {
                ComponentStatus::Failed(e)
            };
        }
        if c.encoding == Encoding::Zstd {
            let expected = c
                .uncompressed_length
                .or_else(|| codec::frame_content_size(stored));
            let cap = self.options.limits.decompress_cap;
            let checked = match expected {
                // Past the cap the component could never be read; do not spend time decoding it.
                Some(n) if n > cap => Err(Rule::DecompressOverCap { length: n, cap }),
                Some(n) => codec::check_length(stored, n),
                None => Err(Rule::ZstdWithoutLength),
            };
            if let Err(rule) = checked {
                return ComponentStatus::Failed(Error::invalid(at, rule));
            }
        }
        let ragged = self
            .parsed
            .manifest
            .objects
            .get(object)
            .filter(|o| o.format == Format::Ragged && role == "offsets");
        if let Some(obj) = ragged {
            let checked = self.decode(object, role, obj, c, stored).and_then(|d| {
                self.ragged_offsets(object, obj, &d)
                    .map_err(|r| Error::invalid(self.at(object, role), r))
            });
            if let Err(e) = checked {
                return ComponentStatus::Failed(e);
            }
        }
        match c.digest.as_ref().and_then(|d| d.algorithm()) {
            Some(a) => ComponentStatus::Verified(a),
            None => ComponentStatus::NoDigest,
        }
    }
}
