//! Cleaning inputs into text (normative; docs/matrix-atom.md "Cleaning"):
//!
//! - **text**: line endings become `\n`; trailing whitespace is cut from
//!   every line; runs of blank lines become one blank line (the block
//!   separator); leading and trailing blank lines go.
//! - **JSON**: every string *value* (never a key), in document order,
//!   each cleaned as text, blocks joined by one blank line (`\n\n`);
//!   empty strings are skipped.
//!
//! - **HTML**: the text content, entities decoded; scripts, styles and the
//!   head dropped; link text kept, URLs never; image alt text dropped;
//!   block elements (`p`, `div`, headings, list items, table cells...)
//!   separated by a blank line; `<br>` a line break; whitespace collapsed
//!   outside `<pre>`; then cleaned as text.
//! - **Markdown**: the text without markup; link text kept, URLs never;
//!   image alt text and raw HTML dropped; code kept as written; each block
//!   (paragraph, heading, list item, code block, table row) its own; a
//!   soft line break is a space; then cleaned as text.

use std::fmt;
use std::path::Path;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::error::{Error, Result};

/// What kind of document an input is, by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    Json,
    Html,
    Markdown,
}

impl Kind {
    pub fn of(path: &Path) -> Option<Kind> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "txt" | "text" => Kind::Text,
            "json" => Kind::Json,
            "html" | "htm" => Kind::Html,
            "md" | "markdown" => Kind::Markdown,
            _ => return None,
        })
    }
}

/// The cleaned text of `bytes`, an input of `kind` named `label`.
pub fn clean(label: &str, kind: Kind, bytes: &[u8]) -> Result<String> {
    let text =
        std::str::from_utf8(bytes).map_err(|e| Error::input(label, format!("not UTF-8: {e}")))?;
    match kind {
        Kind::Text => Ok(clean_text(text)),
        Kind::Json => {
            let mut blocks = Vec::new();
            let mut de = serde_json::Deserializer::from_str(text);
            de.deserialize_any(Strings(&mut blocks))
                .and_then(|()| de.end())
                .map_err(|e| Error::input(label, format!("not JSON: {e}")))?;
            let blocks: Vec<String> = blocks
                .iter()
                .map(|b| clean_text(b))
                .filter(|b| !b.is_empty())
                .collect();
            Ok(blocks.join("\n\n"))
        }
        Kind::Html => Ok(clean_text(&crate::markup::html_text(text))),
        Kind::Markdown => Ok(clean_text(&crate::markup::markdown_text(text))),
    }
}

/// The text rules.
pub fn clean_text(text: &str) -> String {
    let unified = text.replace("\r\n", "\n").replace('\r', "\n");
    let mut out: Vec<&str> = Vec::new();
    let mut blank = false;
    for line in unified.split('\n').map(str::trim_end) {
        if line.is_empty() {
            blank = !out.is_empty();
            continue;
        }
        if blank {
            out.push("");
            blank = false;
        }
        out.push(line);
    }
    out.join("\n")
}

/// Collects every string value in document order.
struct Strings<'a>(&'a mut Vec<String>);

impl<'de> Visitor<'de> for Strings<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E>(self, v: &str) -> std::result::Result<(), E> {
        self.0.push(v.to_owned());
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while seq.next_element_seed(Seed(&mut *self.0))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value_seed(Seed(&mut *self.0))?;
        }
        Ok(())
    }
}

struct Seed<'a>(&'a mut Vec<String>);

impl<'de> serde::de::DeserializeSeed<'de> for Seed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(Strings(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json_clean_by_the_rules() {
        assert_eq!(clean_text("\r\n a  \r\n\r\n\r\nb\t\n\n"), " a\n\nb");
        let j = br#"{"k": "first", "n": 1, "list": ["two", {"deep": "three\r\n\n\nx"}], "e": ""}"#;
        assert_eq!(
            clean("j.json", Kind::Json, j).unwrap(),
            "first\n\ntwo\n\nthree\n\nx"
        );
        let e = clean("j.json", Kind::Json, b"{\"a\": ").unwrap_err();
        assert!(e.to_string().starts_with("j.json: not JSON"), "{e}");
        assert_eq!(clean("p.html", Kind::Html, b"<p>x</p>").unwrap(), "x");
    }
}
