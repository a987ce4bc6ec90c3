//! Reading a v1.1/v1.2 manifest (a map with `version` and `objects`) into the
//! model, straight from the CBOR bytes with the pull decoder.

use std::borrow::Cow;
use std::collections::BTreeMap;

use ciborium::Value;

use crate::cbor;
use crate::cbor_reader::{Head, Reader};
use crate::component::{Component, Encoding};
use crate::components::{parsed_role, Components, Role};
use crate::digest::Digest;
use crate::dtype::{unknown_dtype_hint, DType, LogicalType};
use crate::error::{Error, Location, Result, Rule};
use crate::manifest::{Attributes, FilePart, Format, Manifest, Object, Objects, Origin, Source};
use crate::objects_parallel;
use crate::warning::Warning;

/// The major and minor version this crate implements.
pub(crate) const SUPPORTED: (u64, u64) = (1, 2);

/// Parses `"MAJOR.MINOR[.PATCH]"`, applying the version policy: another
/// major version is an error, a newer minor version a warning.
pub(crate) fn check_version(
    version: &str,
    at: &Location,
    warnings: &mut Vec<Warning>,
) -> Result<(u64, u64)> {
    let bad = |reason: &str| {
        Error::invalid(
            at.clone(),
            Rule::Version {
                version: version.to_owned(),
                reason: reason.to_owned(),
            },
        )
    };
    let mut parts = version.split('.');
    let mut next = || -> Option<u64> { parts.next().and_then(|p| p.parse().ok()) };
    let major = next().ok_or_else(|| bad("expected MAJOR.MINOR[.PATCH]"))?;
    let minor = next().unwrap_or(0);
    if major != SUPPORTED.0 {
        return Err(bad(&format!(
            "major version {major} differs from the supported {}",
            SUPPORTED.0
        )));
    }
    if minor > SUPPORTED.1 {
        warnings.push(Warning::new(
            at.clone(),
            format!(
                "file version {version} is newer than {}.{}; fields it added are ignored",
                SUPPORTED.0, SUPPORTED.1
            ),
        ));
    }
    Ok((major, minor))
}

/// A rule broken inside an object or component, located on the way out.
pub(crate) struct Located {
    rule: Rule,
    object: Option<String>,
    component: Option<String>,
}

impl From<Rule> for Located {
    fn from(rule: Rule) -> Self {
        Located {
            rule,
            object: None,
            component: None,
        }
    }
}

impl Located {
    fn in_object(mut self, name: &str) -> Self {
        self.object.get_or_insert_with(|| name.to_owned());
        self
    }

    fn in_component(mut self, role: &str) -> Self {
        self.component.get_or_insert_with(|| role.to_owned());
        self
    }

    fn into_error(self, file: &str) -> Error {
        Error::invalid(
            Location {
                file: file.to_owned(),
                object: self.object,
                component: self.component,
            },
            self.rule,
        )
    }
}

pub(crate) type Parse<T> = std::result::Result<T, Located>;

pub(crate) fn manifest(
    bytes: &[u8],
    file: &str,
    limits: &crate::Limits,
    warnings: &mut Vec<Warning>,
) -> Result<Manifest> {
    let pieces = Pieces {
        threads: limits.decode_threads,
        min_per_thread: objects_parallel::MIN_PER_THREAD,
    };
    manifest_in(bytes, file, limits, warnings, pieces)
}

/// How a large objects map may be decoded in pieces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pieces {
    pub(crate) threads: usize,
    pub(crate) min_per_thread: usize,
}

/// [`manifest`], its objects map decoded in `pieces` where it can be.
pub(crate) fn manifest_in(
    bytes: &[u8],
    file: &str,
    limits: &crate::Limits,
    warnings: &mut Vec<Warning>,
    pieces: Pieces,
) -> Result<Manifest> {
    let at = Location::file(file);
    let max_depth = limits.max_depth;
    // Objects past `limits.manifest_memory` are refused as they are read.
    let room = |count: usize| limits.within_memory(count as u64, bytes.len() as u64);
    let mut r = Reader::new(bytes, max_depth);
    let head = r.head().map_err(|rule| Error::invalid(at.clone(), rule))?;
    if !matches!(head, Head::Map(_)) {
        return Err(Error::invalid(
            at,
            Rule::ManifestNotMap {
                found: head.kind(),
                expected: "map",
            },
        ));
    }
    let mut r = Reader::new(bytes, max_depth);
    let mut version: Option<String> = None;
    let mut source = Source::Zt;
    let mut files = BTreeMap::new();
    let mut attributes = Attributes::new();
    let mut objects: Option<Parse<Objects>> = None;
    let mut version_checked = false;
    let root = r.map::<Located>("manifest", "manifest", |r, key| {
        match key.bytes() {
            b"version" => version = Some(r.text("version")?.into_owned()),
            b"source" => {
                let t = r.text("source")?;
                source = Source::from_name(&t).ok_or_else(|| Rule::UnknownSource {
                    value: t.to_string(),
                })?;
            }
            b"attributes" => attributes = attribute_map(r, "attributes")?,
            b"files" => files = file_map(r)?,
            b"objects" => {
                if let Some(v) = &version {
                    // Check the version before reading a schema it may not share.
                    check_version(v, &at, warnings).map_err(|e| Located::from(error_rule(e)))?;
                    version_checked = true;
                    objects = Some(Ok(object_map(r, &room, pieces)?));
                } else {
                    // Canonical CBOR puts `objects` before `version`: read
                    // once, now, and whether a failure of its schema is
                    // the one reported waits for the version (another
                    // major version's objects may have another shape). A
                    // failed read leaves `r` where it was, to skip.
                    let mut ahead = r.clone();
                    match object_map(&mut ahead, &room, pieces) {
                        Ok(o) => {
                            *r = ahead;
                            objects = Some(Ok(o));
                        }
                        Err(e) => match r.skip() {
                            Ok(()) => objects = Some(Err(e)),
                            // Broken CBOR, whatever the version: the
                            // read's error if it found that (it names the
                            // object), else the skip's (the read stopped
                            // at a fault of the schema before it).
                            Err(broken) => {
                                return Err(if e.rule.is_cbor() { e } else { broken.into() })
                            }
                        },
                    }
                }
            }
            _ => {
                key.text()?;
                r.skip()?
            }
        }
        Ok(())
    });
    root.map_err(|e| e.into_error(file))?;
    if !r.is_at_end() {
        let rest = bytes.len().saturating_sub(r.position());
        return Err(Error::invalid(
            at,
            Rule::CborSyntax {
                detail: format!("{rest} trailing bytes after the manifest"),
            },
        ));
    }
    let version = version
        .ok_or_else(|| Error::invalid(at.clone(), Rule::MissingField { field: "version" }))?;
    if !version_checked {
        check_version(&version, &at, warnings)?;
    }
    let objects = match objects {
        Some(parsed) => parsed.map_err(|e| e.into_error(file))?,
        None => return Err(Error::invalid(at, Rule::MissingField { field: "objects" })),
    };
    Ok(Manifest {
        version,
        origin: Origin::V1,
        source,
        files,
        attributes,
        objects,
    })
}

/// Recovers the rule of a version error raised inside the root map.
fn error_rule(e: Error) -> Rule {
    match e {
        Error::Invalid { rule, .. } => rule,
        Error::Io { source, .. } => Rule::CborSyntax {
            detail: source.to_string(),
        },
    }
}

fn object_map(
    r: &mut Reader<'_>,
    room: &dyn Fn(usize) -> std::result::Result<(), Rule>,
    pieces: Pieces,
) -> Parse<Objects> {
    let one = |r: &mut Reader<'_>| object(r).ok();
    let list = match objects_parallel::objects(r, pieces.threads, pieces.min_per_thread, room, one)
    {
        Some(list) => list,
        None => object_list(r, room)?,
    };
    // Sorted once, in place, which finds a name given twice.
    Objects::from_unique_vec(list).map_err(|name| {
        Located::from(Rule::DuplicateKey {
            key: name.into(),
            context: "objects".to_owned(),
        })
    })
}

/// The objects map's entries read one after another, in its order.
fn object_list(
    r: &mut Reader<'_>,
    room: &dyn Fn(usize) -> std::result::Result<(), Rule>,
) -> Parse<objects_parallel::Entries> {
    // Sized once from the map's announced length (within the cap on
    // objects), not grown push by push: a 10,000-object manifest spent a
    // tenth of its decoding in reallocations.
    let announced = r.peek_map_len().and_then(|n| usize::try_from(n).ok());
    let mut list = objects_parallel::Entries::new();
    if let Some(n) = announced.filter(|&n| room(n).is_ok()) {
        list.reserve_exact(n);
    }
    r.map_checked_by_caller::<Located>("objects", "objects", |r, name| {
        room(list.len().saturating_add(1))?;
        let name = name.text()?;
        let obj = object(r).map_err(|e| e.in_object(name))?;
        list.push((name.into(), obj));
        Ok(())
    })?;
    Ok(list)
}

/// One object's map (its name read by the caller).
pub(crate) fn object(r: &mut Reader<'_>) -> Parse<Object> {
    let mut shape = None;
    let mut format: Option<Cow<'_, str>> = None;
    let mut attributes = Attributes::new();
    let mut components = None;
    const FIELDS: &[&[u8]] = &[b"shape", b"format", b"attributes", b"components"];
    r.fields::<Located>("object", "object", FIELDS, |r, field, key| {
        match field {
            Some(0) => shape = Some(r.u64_array("shape")?),
            Some(1) => format = Some(r.text("format")?),
            Some(2) => attributes = attribute_map(r, "attributes")?,
            Some(3) => {
                // Most objects have one component: no vector for it.
                let mut first: Option<(Role, Component)> = None;
                let mut more: Vec<(Role, Component)> = Vec::new();
                r.map::<Located>("components", "components", |r, role| {
                    let role = role.text()?;
                    let c = component(r).map_err(|e| e.in_component(role))?;
                    let entry = (parsed_role(role), c);
                    match first {
                        None => first = Some(entry),
                        Some(_) => more.push(entry),
                    }
                    Ok(())
                })?;
                components = Some(match (first, more.is_empty()) {
                    (Some((role, c)), true) => Components::one(role, c),
                    (first, _) => first.into_iter().chain(more).collect(),
                });
            }
            _ => {
                key.text()?;
                r.skip()?
            }
        }
        Ok(())
    })?;
    Ok(Object {
        shape: required(shape, "shape")?,
        format: Format::parse(&required(format, "format")?),
        attributes,
        components: required(components, "components")?,
    })
}

/// `v`, or the error that `field` is missing. (A function, not `ok_or`:
/// the error is built only when it is needed, on the parser's hot path.)
fn required<T>(v: Option<T>, field: &'static str) -> Result<T, Rule> {
    match v {
        Some(v) => Ok(v),
        None => Err(Rule::MissingField { field }),
    }
}

fn optional_text<'a>(r: &mut Reader<'a>, field: &str) -> Result<Option<Cow<'a, str>>, Rule> {
    if r.null() {
        return Ok(None);
    }
    r.text(field).map(Some)
}

fn component(r: &mut Reader<'_>) -> Parse<Component> {
    let mut dtype = None;
    let mut logical_type = None;
    let mut offset = None;
    let mut length = None;
    let mut uncompressed_length = None;
    let mut encoding = Encoding::Raw;
    let mut digest = None;
    let mut digest_computed = false;
    let mut synthesized = false;
    let mut file = None;
    const FIELDS: &[&[u8]] = &[
        b"dtype",
        b"type",
        b"offset",
        b"length",
        b"uncompressed_length",
        b"encoding",
        b"digest",
        b"file",
        b"placement",
        b"digest_by",
    ];
    r.fields::<Located>("component", "component", FIELDS, |r, field, key| {
        match field {
            Some(0) => {
                let t = r.text("dtype")?;
                let d = DType::from_name(&t).ok_or_else(|| Rule::UnknownDtype {
                    value: t.to_string(),
                    hint: unknown_dtype_hint(&t),
                })?;
                dtype = Some(d);
            }
            Some(1) => logical_type = optional_text(r, "type")?.map(|t| LogicalType::parse(&t)),
            Some(2) => offset = Some(r.u64("offset")?),
            Some(3) => length = Some(r.u64("length")?),
            Some(4) => {
                uncompressed_length = if r.null() {
                    None
                } else {
                    Some(r.u64("uncompressed_length")?)
                }
            }
            Some(5) => {
                encoding = match optional_text(r, "encoding")?.as_deref() {
                    None | Some("raw") => Encoding::Raw,
                    Some("zstd") => Encoding::Zstd,
                    Some(other) => {
                        return Err(Rule::UnknownEncoding {
                            value: other.to_owned(),
                        }
                        .into())
                    }
                }
            }
            Some(6) => {
                digest = optional_text(r, "digest")?
                    .map(|d| Digest::parse(&d))
                    .transpose()?
            }
            Some(7) => file = optional_text(r, "file")?.map(|f| std::sync::Arc::from(&*f)),
            Some(8) => {
                synthesized = flag(r, "placement", "synthesized", "\"file\" or \"synthesized\"")?
            }
            Some(9) => digest_computed = flag(r, "digest_by", "server", "\"file\" or \"server\"")?,
            _ => {
                key.text()?;
                r.skip()?
            }
        }
        Ok(())
    })?;
    Ok(Component {
        dtype: required(dtype, "dtype")?,
        logical_type,
        offset: required(offset, "offset")?,
        length: required(length, "length")?,
        uncompressed_length,
        encoding,
        digest,
        digest_computed,
        synthesized,
        file,
        legacy: None,
        slot: 0,
    })
}

/// `files`: name => {size, etag?}, the files of a multi-file entry.
fn file_map(r: &mut Reader<'_>) -> Parse<BTreeMap<String, FilePart>> {
    let mut out = BTreeMap::new();
    r.map::<Located>("files", "files", |r, name| {
        let name = name.text()?.to_owned();
        if !crate::source::safetensors_index::safe_shard(&name) {
            return Err(Rule::FilePath { file: name }.into());
        }
        let mut size = None;
        let mut etag = None;
        r.map::<Located>("file", "file", |r, key| {
            match key.bytes() {
                b"size" => size = Some(r.u64("size")?),
                b"etag" => etag = optional_text(r, "etag")?.map(|e| e.into_owned()),
                _ => {
                    key.text()?;
                    r.skip()?
                }
            }
            Ok(())
        })?;
        let size = required(size, "size")?;
        out.insert(name, FilePart { size, etag });
        Ok(())
    })?;
    Ok(out)
}

/// A text field that is absent, `"file"`, or `yes`: whether it is `yes`.
fn flag(
    r: &mut Reader<'_>,
    field: &'static str,
    yes: &str,
    expected: &'static str,
) -> Result<bool, Rule> {
    match optional_text(r, field)?.as_deref() {
        None | Some("file") => Ok(false),
        Some(v) if v == yes => Ok(true),
        Some(_) => Err(Rule::FieldType {
            field: field.to_owned(),
            expected,
        }),
    }
}

/// Attributes are rare and free-form: skip them strictly, then decode the
/// span into CBOR values.
fn attribute_map(r: &mut Reader<'_>, field: &str) -> Result<Attributes, Rule> {
    if r.null() {
        return Ok(Attributes::new());
    }
    let start = r.position();
    let depth = r.depth();
    r.skip()?;
    let span = r.span(start, r.position());
    let value = cbor::decode(span, r.max_depth_left(depth))?;
    attributes_from_value(&value, field)
}

pub(crate) fn attributes_from_value(v: &Value, field: &str) -> Result<Attributes, Rule> {
    let wrong = |expected| Rule::FieldType {
        field: field.to_owned(),
        expected,
    };
    let Value::Map(entries) = v else {
        return Err(wrong("a map"));
    };
    let mut out = Attributes::new();
    for (k, v) in entries {
        let Value::Text(k) = k else {
            return Err(wrong("a map with text keys"));
        };
        out.insert(k.clone(), v.clone());
    }
    Ok(out)
}

/// Decodes the bare manifest `bytes` once serially and once in pieces of
/// a few objects on three threads, and panics unless the two agree: the
/// same manifest, or the same error. For the fuzz targets and the tests.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn check_against_serial(bytes: &[u8]) {
    let limits = crate::Limits {
        manifest_cap: 1 << 20,
        ..crate::Limits::default()
    };
    let read = |threads, min_per_thread| {
        let pieces = Pieces {
            threads,
            min_per_thread,
        };
        manifest_in(bytes, "m.zt", &limits, &mut Vec::new(), pieces).map_err(|e| e.to_string())
    };
    let serial = read(1, objects_parallel::MIN_PER_THREAD);
    for min_per_thread in [1, 2, 3] {
        assert_eq!(read(3, min_per_thread), serial, "{min_per_thread} a piece");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ciborium::Value as V;

    #[test]
    fn version_policy() {
        let at = Location::file("t");
        let mut w = Vec::new();
        assert_eq!(check_version("1.2.0", &at, &mut w).unwrap(), (1, 2));
        assert!(w.is_empty());
        check_version("1.3.0", &at, &mut w).unwrap();
        assert_eq!(w.len(), 1);
        assert!(check_version("2.0.0", &at, &mut w).is_err());
        assert!(check_version("x", &at, &mut w).is_err());
    }

    /// An object of one empty `u8` component, with or without its shape.
    fn object_value(with_shape: bool) -> V {
        let component = V::Map(vec![
            (V::Text("dtype".into()), V::Text("u8".into())),
            (V::Text("offset".into()), V::Integer(0.into())),
            (V::Text("length".into()), V::Integer(0.into())),
        ]);
        let mut fields = vec![
            (V::Text("format".into()), V::Text("dense".into())),
            (
                V::Text("components".into()),
                V::Map(vec![(V::Text("data".into()), component)]),
            ),
        ];
        if with_shape {
            let shape = V::Array(vec![V::Integer(0.into())]);
            fields.push((V::Text("shape".into()), shape));
        }
        V::Map(fields)
    }

    /// A manifest of `version` with objects `names` (the last without
    /// its shape unless `whole`), `objects` first (as canonical CBOR
    /// orders the keys) or `version` first.
    fn manifest_of(names: &[String], version: &str, objects_first: bool, whole: bool) -> Vec<u8> {
        let objects = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                (
                    V::Text(n.clone()),
                    object_value(whole || i.saturating_add(1) < names.len()),
                )
            })
            .collect();
        let mut root = vec![
            (V::Text("version".into()), V::Text(version.into())),
            (V::Text("objects".into()), V::Map(objects)),
        ];
        if objects_first {
            root.reverse();
        }
        let mut out = Vec::new();
        ciborium::ser::into_writer(&V::Map(root), &mut out).unwrap();
        out
    }

    fn read(bytes: &[u8]) -> Result<Manifest> {
        manifest(bytes, "t.zt", &crate::Limits::default(), &mut Vec::new())
    }

    /// A manifest's `files` name paths a client writes below a directory
    /// (a sharded checkpoint's shards): each must be a plain relative path.
    #[test]
    fn files_are_plain_relative_paths() {
        let with_files = |name: &str| {
            let part = V::Map(vec![(V::Text("size".into()), V::Integer(8.into()))]);
            let root = V::Map(vec![
                (V::Text("version".into()), V::Text("1.2.0".into())),
                (V::Text("objects".into()), V::Map(vec![])),
                (
                    V::Text("files".into()),
                    V::Map(vec![(V::Text(name.into()), part)]),
                ),
            ]);
            let mut out = Vec::new();
            ciborium::ser::into_writer(&root, &mut out).unwrap();
            read(&out)
        };
        for ok in ["m-1.safetensors", "sub/m-2.safetensors"] {
            assert_eq!(with_files(ok).unwrap().files.len(), 1, "{ok}");
        }
        for bad in [
            "../../pwned.safetensors",
            "/etc/x.safetensors",
            "a/../../x",
            "a//b",
            "./x",
            "a\\..\\x",
            "",
        ] {
            let e = with_files(bad).unwrap_err();
            assert_eq!(e.rule().unwrap().name(), "file-path", "{bad}: {e}");
            assert!(e.to_string().contains("t.zt"), "{e}");
        }
    }

    /// `objects` before `version` (canonical CBOR's order) reads the
    /// same, once; a fault in the objects is reported as with `version`
    /// first, unless the version is one this crate does not read, which
    /// is reported instead (its objects may have another shape).
    #[test]
    fn objects_before_version_read_as_after_it() {
        let names: Vec<String> = (0..30).map(|i| format!("o{i:02}")).collect();
        for first in [false, true] {
            let m = read(&manifest_of(&names, "1.2.0", first, true)).unwrap();
            assert_eq!(m.objects.len(), 30);
            assert!(read(&manifest_of(&[], "1.2.0", first, true))
                .unwrap()
                .objects
                .is_empty());
            let e = read(&manifest_of(&names, "1.2.0", first, false)).unwrap_err();
            assert_eq!(e.rule().unwrap().name(), "missing-field", "{e}");
            assert!(e.to_string().contains("o29"), "{e}");
            let e = read(&manifest_of(&names, "2.0.0", first, false)).unwrap_err();
            assert_eq!(e.rule().unwrap().name(), "version", "{e}");
        }
    }

    /// With `objects` first, a fault of the schema followed by broken
    /// CBOR reports the CBOR's fault, whatever the version (the version
    /// cannot be reached to say which schema applies); broken CBOR alone
    /// is reported naming its object.
    #[test]
    fn objects_first_broken_cbor_after_a_schema_fault_reports_the_cbor() {
        let replace = |bytes: &mut Vec<u8>, from: &[u8], to: &[u8], last: bool| {
            let mut at = bytes
                .windows(from.len())
                .enumerate()
                .filter(|(_, w)| *w == from);
            let found = if last { at.next_back() } else { at.next() };
            let i = found.unwrap().0;
            bytes.splice(i..i + from.len(), to.iter().copied());
        };
        let names = ["a".to_owned(), "b".to_owned()];
        for version in ["1.2.0", "2.0.0"] {
            let mut bytes = manifest_of(&names, version, true, true);
            // `b`'s dtype not UTF-8: broken CBOR, found by the read and the skip alike.
            replace(&mut bytes, b"\x62u8", b"\x62\xff\xfe", true);
            let e = read(&bytes).unwrap_err();
            assert_eq!(e.rule().unwrap().name(), "cbor-syntax", "{e}");
            assert!(e.to_string().contains("\"b\""), "{e}");
            // `a` without its shape before it: the skip's fault.
            replace(&mut bytes, b"\x65shape", b"\x65shapX", false);
            let e = read(&bytes).unwrap_err();
            assert_eq!(e.rule().unwrap().name(), "cbor-syntax", "{version}: {e}");
        }
    }

    /// Object names given twice are refused by name whether the map's
    /// names come sorted or not, however far apart they are, and whether
    /// `objects` comes before `version` or after it.
    #[test]
    #[allow(clippy::indexing_slicing)]
    fn an_object_name_given_twice_is_refused() {
        let sorted: Vec<String> = (0..40).map(|i| format!("o{i:03}")).collect();
        let mut shuffled = sorted.clone();
        shuffled.reverse();
        for first in [false, true] {
            let bytes = |names: &[String]| manifest_of(names, "1.2.0", first, true);
            assert_eq!(read(&bytes(&sorted)).unwrap().objects.len(), 40);
            assert_eq!(read(&bytes(&shuffled)).unwrap().objects.len(), 40);
            for names in [&sorted, &shuffled] {
                for (a, b) in [(0, 39), (20, 21), (3, 5)] {
                    let mut dup = names.clone();
                    dup[b] = dup[a].clone();
                    let e = read(&bytes(&dup)).unwrap_err();
                    assert_eq!(e.rule().unwrap().name(), "duplicate-key", "{e}");
                    assert!(e.to_string().starts_with("t.zt"), "{e}");
                    assert!(e.to_string().contains(&dup[a]), "{e}");
                    assert!(e.to_string().contains("objects"), "{first}: {e}");
                }
            }
        }
        // The same name once in chunks (an indefinite-length text key).
        let plain = manifest_of(
            &["o000".to_owned(), "zzzz".to_owned()],
            "1.2.0",
            false,
            true,
        );
        let at = plain.windows(5).position(|w| w == b"\x64zzzz").unwrap();
        let mut chunked = plain[..at].to_vec();
        chunked.extend_from_slice(b"\x7f\x62o0\x6200\xff");
        chunked.extend_from_slice(&plain[at + 5..]);
        let e = manifest(&chunked, "t.zt", &crate::Limits::default(), &mut Vec::new());
        let e = e.unwrap_err();
        assert_eq!(e.rule().unwrap().name(), "duplicate-key", "{e}");
    }

    /// A `.zt` file of more objects than `limits.manifest_memory` holds is
    /// refused by name as its objects are read.
    #[test]
    fn manifests_past_the_memory_cap_are_refused_as_they_are_read() {
        let mut w = crate::Writer::new(Vec::new(), "t.zt").unwrap();
        for i in 0..50u8 {
            let name = format!("o{i:02}");
            w.add_dense(&name, &[1], crate::DType::U8, &[i], Default::default())
                .unwrap();
        }
        let file = w.finish().unwrap();
        let limits = |memory| crate::Limits {
            manifest_memory: memory,
            ..crate::Limits::default()
        };
        let open = |memory| {
            let options = crate::ReadOptions {
                limits: limits(memory),
                ..crate::ReadOptions::default()
            };
            crate::ZtFile::from_bytes("t.zt", &file, options)
        };
        assert!(open(u64::MAX).is_ok());
        let e = open(crate::OBJECT_MEMORY * 20).unwrap_err();
        assert_eq!(e.rule().unwrap().name(), "manifest-over-memory");
        assert!(e.to_string().starts_with("t.zt"), "{e}");
        assert!(e.to_string().contains("objects or more"), "{e}");
    }
}
