//! Manifest to CBOR, deterministically: maps in key order, fixed field order.

use ciborium::Value;

use crate::component::{Component, Encoding};
use crate::manifest::{Attributes, Manifest, Object, Source};

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

fn attrs(a: &Attributes) -> Value {
    Value::Map(a.iter().map(|(k, v)| (text(k), v.clone())).collect())
}

fn component(c: &Component) -> Value {
    let mut m = vec![(text("dtype"), text(c.dtype.name()))];
    if let Some(t) = &c.logical_type {
        m.push((text("type"), text(t.name())));
    }
    m.push((text("offset"), Value::Integer(c.offset.into())));
    m.push((text("length"), Value::Integer(c.length.into())));
    if let Some(u) = c.uncompressed_length {
        m.push((text("uncompressed_length"), Value::Integer(u.into())));
    }
    if c.synthesized {
        m.push((text("placement"), text("synthesized")));
    }
    if let Some(f) = &c.file {
        m.push((text("file"), text(f)));
    }
    if c.encoding == Encoding::Zstd {
        m.push((text("encoding"), text(Encoding::Zstd.name())));
    }
    if let Some(d) = &c.digest {
        m.push((text("digest"), text(&d.as_str())));
        if c.digest_computed {
            m.push((text("digest_by"), text("server")));
        }
    }
    Value::Map(m)
}

fn object(o: &Object) -> Value {
    let shape = o.shape.iter().map(|&d| Value::Integer(d.into())).collect();
    let mut m = vec![
        (text("shape"), Value::Array(shape)),
        (text("format"), text(o.format.name())),
    ];
    if !o.attributes.is_empty() {
        m.push((text("attributes"), attrs(&o.attributes)));
    }
    let comps = o
        .components
        .iter()
        .map(|(k, c)| (text(k), component(c)))
        .collect();
    m.push((text("components"), Value::Map(comps)));
    Value::Map(m)
}

/// The manifest as a CBOR value, in the v1.2 schema whatever its origin.
pub fn manifest_value(m: &Manifest, version: &str) -> Value {
    let mut root = vec![(text("version"), text(version))];
    // A `.zt` manifest stays exactly what v1.2 writers produce.
    if m.source != Source::Zt {
        root.push((text("source"), text(m.source.name())));
    }
    if !m.files.is_empty() {
        let files = m
            .files
            .iter()
            .map(|(name, f)| {
                let mut e = vec![(text("size"), Value::Integer(f.size.into()))];
                if let Some(t) = &f.etag {
                    e.push((text("etag"), text(t)));
                }
                (text(name), Value::Map(e))
            })
            .collect();
        root.push((text("files"), Value::Map(files)));
    }
    if !m.attributes.is_empty() {
        root.push((text("attributes"), attrs(&m.attributes)));
    }
    let objects = m
        .objects
        .iter()
        .map(|(k, o)| (text(k), object(o)))
        .collect();
    root.push((text("objects"), Value::Map(objects)));
    Value::Map(root)
}

/// Encodes a manifest as v1.2 CBOR.
pub fn manifest_cbor(m: &Manifest) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = write_manifest_cbor(m, &mut out);
    out
}

/// Writes a manifest as v1.2 CBOR, the same bytes as [`manifest_cbor`],
/// one object at a time: no value tree of the whole manifest is built, and
/// a writer that refuses more bytes stops it early.
pub fn write_manifest_cbor(m: &Manifest, mut w: impl std::io::Write) -> std::io::Result<()> {
    cbor_head(m, &mut w)?;
    for (k, o) in &m.objects {
        cbor_object(k, o, &mut w)?;
    }
    Ok(())
}

/// A v1.2 CBOR manifest up to its objects: every entry but `objects`, then
/// that key and its map's head; [`cbor_object`] follows for each object.
pub(crate) fn cbor_head(m: &Manifest, mut w: impl std::io::Write) -> std::io::Result<()> {
    let head = Manifest {
        version: m.version.clone(),
        origin: m.origin,
        source: m.source,
        files: m.files.clone(),
        attributes: m.attributes.clone(),
        objects: crate::Objects::new(),
    };
    let Value::Map(mut root) = manifest_value(&head, crate::SPEC_VERSION) else {
        return Ok(());
    };
    // `objects` is the last entry: its map is written an object at a time.
    root.pop();
    map_header(&mut w, (root.len() as u64).saturating_add(1))?;
    for (k, v) in &root {
        cbor(k, &mut w)?;
        cbor(v, &mut w)?;
    }
    cbor(&text("objects"), &mut w)?;
    map_header(&mut w, m.objects.len() as u64)
}

/// One entry of a v1.2 CBOR manifest's `objects` map.
pub(crate) fn cbor_object(
    name: &str,
    o: &Object,
    mut w: impl std::io::Write,
) -> std::io::Result<()> {
    cbor(&text(name), &mut w)?;
    cbor(&object(o), &mut w)
}

fn cbor(v: &Value, w: impl std::io::Write) -> std::io::Result<()> {
    ciborium::ser::into_writer(v, w).map_err(|e| std::io::Error::other(e.to_string()))
}

/// A definite-length map's head (major type 5), in its shortest form.
fn map_header(w: &mut impl std::io::Write, len: u64) -> std::io::Result<()> {
    const MAP: u8 = 5 << 5;
    match len {
        0..=23 => w.write_all(&[MAP | len as u8]),
        24..=0xff => w.write_all(&[MAP | 24, len as u8]),
        0x100..=0xffff => {
            w.write_all(&[MAP | 25])?;
            w.write_all(&(len as u16).to_be_bytes())
        }
        0x1_0000..=0xffff_ffff => {
            w.write_all(&[MAP | 26])?;
            w.write_all(&(len as u32).to_be_bytes())
        }
        _ => {
            w.write_all(&[MAP | 27])?;
            w.write_all(&len.to_be_bytes())
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::{FilePart, Limits, Source};

    #[test]
    fn written_one_object_at_a_time_is_the_whole_value_encoded() {
        let mut header = String::from(r#"{"__metadata__":{"k":"v"}"#);
        let mut offset = 0;
        for i in 0..300 {
            header.push_str(&format!(
                r#","t{i}":{{"dtype":"F32","shape":[2],"data_offsets":[{offset},{}]}}"#,
                offset + 8
            ));
            offset += 8;
        }
        header.push('}');
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header.as_bytes());
        file.resize(file.len() + offset, 0);
        let loaded = crate::source::parse(Source::Safetensors, "m", &file, &Limits::default());
        let mut m = loaded.unwrap().parsed.manifest;
        m.files.insert(
            "other".into(),
            FilePart {
                size: 9,
                etag: Some("\"e\"".into()),
            },
        );
        let mut whole = Vec::new();
        ciborium::ser::into_writer(&manifest_value(&m, crate::SPEC_VERSION), &mut whole).unwrap();
        assert_eq!(manifest_cbor(&m), whole);
        let empty = Manifest::new();
        let mut whole = Vec::new();
        ciborium::ser::into_writer(&manifest_value(&empty, crate::SPEC_VERSION), &mut whole)
            .unwrap();
        assert_eq!(manifest_cbor(&empty), whole);
    }
}
