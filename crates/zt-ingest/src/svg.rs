//! `zt ingest svg`: one atom of an SVG-Tensor file drawn as an SVG grid,
//! a cell per token, row-major, coloured from the token id alone (the
//! same id, the same colour, everywhere), with the id and, given a symbol
//! map, the token's text as the cell's tooltip.

use std::fmt::Write as _;

use zt_format::atoms::svg_tensor::{SvgHeader, HEADER_LEN};

use crate::error::{Error, Result};
use zt_format::atoms::symbols::SymbolMap;

/// The cell size in SVG user units.
const CELL: u32 = 16;

/// A colour for `id`: its bits mixed (SplitMix64's finalizer), then the
/// low 24 bits, kept away from the darkest shades so text stays legible.
pub fn colour(id: u32) -> String {
    let mut z = u64::from(id).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let c = |shift: u32| 64 + ((z >> shift) & 0xFF) * 191 / 255;
    format!("#{:02x}{:02x}{:02x}", c(0), c(8), c(16))
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// The SVG of atom `atom` of the SVG-Tensor file `svgt` (named `label`).
pub fn render(label: &str, svgt: &[u8], atom: u64, map: Option<&SymbolMap>) -> Result<String> {
    let h = SvgHeader::parse(svgt, svgt.len() as u64)
        .map_err(|r| Error::verify(label, r.to_string()))?;
    if atom >= h.atom_count {
        return Err(Error::input(
            label,
            format!("atom {atom} is outside its {} atoms", h.atom_count),
        ));
    }
    let (rows, cols) = (u32::from(h.rows), u32::from(h.cols));
    let cells = u64::from(rows) * u64::from(cols);
    let start = HEADER_LEN as u64 + atom * cells * 2;
    let texts: std::collections::HashMap<u32, &str> = map
        .map(|m| m.symbols.iter().map(|s| (s.id, s.text.as_str())).collect())
        .unwrap_or_default();
    let mut out = String::new();
    let (w, hgt) = (cols * CELL, rows * CELL);
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{hgt}" viewBox="0 0 {w} {hgt}">"#
    );
    let _ = writeln!(
        out,
        "<title>{} atom {atom} ({rows}x{cols})</title>",
        escape(label)
    );
    for i in 0..cells {
        let at = usize::try_from(start + i * 2).unwrap_or(usize::MAX);
        let id = svgt
            .get(at..at.saturating_add(2))
            .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
        let id = u32::from(id);
        let (r, c) = (i / u64::from(cols), i % u64::from(cols));
        let tip = match texts.get(&id) {
            Some(t) => format!("{id}: {}", escape(t)),
            None => id.to_string(),
        };
        let _ = writeln!(
            out,
            r#"<rect x="{}" y="{}" width="{CELL}" height="{CELL}" fill="{}"><title>{tip}</title></rect>"#,
            c * u64::from(CELL),
            r * u64::from(CELL),
            colour(id)
        );
    }
    out.push_str("</svg>\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rect_per_token_coloured_by_id_with_escaped_text() {
        let mut svgt = SvgHeader {
            rows: 1,
            cols: 2,
            atom_count: 2,
            data_offset: 32,
        }
        .encode()
        .to_vec();
        for id in [7u16, 8, 9, 7] {
            svgt.extend_from_slice(&id.to_le_bytes());
        }
        let map: SymbolMap = serde_json::from_str(
            r#"{"version":1,"vocab_size":10,"unk_id":0,"pad_id":0,"byte_fallback":false,
                "symbols":[{"id":9,"text":"<b>&'"}]}"#,
        )
        .unwrap();
        let s = render("a.svgt", &svgt, 1, Some(&map)).unwrap();
        assert_eq!(s.matches("<rect").count(), 2);
        assert!(s.contains("9: &lt;b&gt;&amp;&apos;"), "{s}");
        assert!(s.contains(&colour(7)));
        assert_eq!(colour(7), colour(7));
        assert_ne!(colour(7), colour(8));
        assert!(render("a.svgt", &svgt, 2, None).is_err());
    }
}
