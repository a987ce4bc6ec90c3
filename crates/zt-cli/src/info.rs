//! `zt info`: the version, attributes and a table of objects.

use std::io::Write;

use anyhow::Result;
use zt_format::{Manifest, Warning};

use zt_format::manifest_json::{cbor_to_json, origin_name, ManifestDoc};
use zt_format::select::Selection;

use crate::exit::{Failure, USAGE};

/// The manifest restricted to the objects that `patterns` select.
pub fn selected(m: &Manifest, patterns: &[String]) -> Result<Manifest> {
    let sel = Selection::new(patterns).map_err(|e| Failure::new(USAGE, e.to_string()))?;
    Ok(sel
        .filter(m)
        .map_err(|e| Failure::new(USAGE, e.to_string()))?)
}

/// Prints a manifest as JSON (the shared schema) or as a table.
pub fn print(out: &mut impl Write, m: &Manifest, warnings: &[Warning], json: bool) -> Result<()> {
    if json {
        /// The manifest's document with the reader's warnings, streamed
        /// through a buffer (no JSON tree is built).
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            #[serde(flatten)]
            manifest: ManifestDoc<'a>,
            warnings: Vec<String>,
        }
        let doc = Doc {
            manifest: ManifestDoc(m),
            warnings: warnings.iter().map(|w| w.to_string()).collect(),
        };
        let mut buf = std::io::BufWriter::with_capacity(1 << 16, &mut *out);
        serde_json::to_writer_pretty(&mut buf, &doc)?;
        writeln!(buf)?;
        buf.flush()?;
        return Ok(());
    }
    match m.source {
        zt_format::Source::Zt => {
            writeln!(out, "version: {} ({})", m.version, origin_name(m.origin))?
        }
        // Another source's manifest is our rendering of its header.
        other => writeln!(out, "source: {other}")?,
    }
    for w in warnings {
        writeln!(out, "warning: {w}")?;
    }
    if !m.attributes.is_empty() {
        writeln!(out, "attributes:")?;
        for (k, v) in &m.attributes {
            writeln!(out, "  {k}: {}", cbor_to_json(v))?;
        }
    }
    let total: u64 = m.objects.values().map(|o| o.stored_bytes()).sum();
    writeln!(out, "objects: {} ({total} bytes on disk)", m.objects.len())?;
    let rows: Vec<[String; 8]> = m
        .components()
        .map(|(name, role, c)| {
            let o = &m.objects[name];
            let shape = format!("{:?}", o.shape);
            let dtype = match &c.logical_type {
                Some(t) => format!("{}/{}", c.dtype, t),
                None => c.dtype.to_string(),
            };
            let digest = c.digest.as_ref().map_or("-".to_owned(), |d| d.to_string());
            [
                name.to_owned(),
                o.format.name().to_owned(),
                shape,
                role.to_owned(),
                dtype,
                c.encoding.name().to_owned(),
                c.length.to_string(),
                digest,
            ]
        })
        .collect();
    let header = [
        "NAME",
        "FORMAT",
        "SHAPE",
        "COMPONENT",
        "DTYPE/TYPE",
        "ENCODING",
        "BYTES",
        "DIGEST",
    ];
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[&str]| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s
    };
    writeln!(out, "{}", line(&header))?;
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        writeln!(out, "{}", line(&cells))?;
    }
    Ok(())
}
