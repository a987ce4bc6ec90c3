//! Manifest to CBOR, deterministically: maps in key order, fixed field order.

use ciborium::Value;

use crate::manifest::{Attributes, Component, Encoding, Manifest, Object, Source};

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
        m.push((text("digest"), text(d.as_str())));
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
    let _ = ciborium::ser::into_writer(&manifest_value(m, crate::SPEC_VERSION), &mut out);
    out
}
