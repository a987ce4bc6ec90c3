//! Tokenizing (seed 002 section 3.2, made exact; docs/matrix-atom.md):
//! normalize with the map's `normalization`, spell spaces the map's way
//! (`whitespace`), then take the longest symbol that matches at each
//! position; a character no symbol starts with becomes its UTF-8 bytes
//! (`byte_base_id + byte`) under `byte_fallback`, else `unk_id`. Where two
//! symbols have the same text, the lower id wins. Same input, same ids,
//! on every machine.

use unicode_normalization::UnicodeNormalization;

use zt_format::atoms::symbols::{Normalization, SymbolMap, Whitespace};

/// A byte trie of the symbols: each node's children sorted by byte, and
/// the id of the symbol that ends there, if one does.
#[derive(Debug, Clone, Default)]
struct Node {
    children: Vec<(u8, u32)>,
    id: Option<u32>,
}

/// A tokenizer built from a symbol map.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    /// The symbols' trie; node 0 is the root.
    nodes: Vec<Node>,
    normalization: Normalization,
    whitespace: Whitespace,
    byte_fallback: bool,
    byte_base_id: u32,
    unk_id: u32,
}

impl Tokenizer {
    pub fn new(map: &SymbolMap) -> Tokenizer {
        let mut nodes = vec![Node::default()];
        for s in map.symbols.iter().filter(|s| !s.text.is_empty()) {
            let mut at = 0usize;
            for &b in s.text.as_bytes() {
                let children = &nodes[at].children;
                at = match children.binary_search_by_key(&b, |&(c, _)| c) {
                    Ok(i) => children[i].1 as usize,
                    Err(i) => {
                        let next = nodes.len();
                        nodes[at].children.insert(i, (b, next as u32));
                        nodes.push(Node::default());
                        next
                    }
                };
            }
            let id = &mut nodes[at].id;
            *id = Some(id.map_or(s.id, |have| have.min(s.id)));
        }
        Tokenizer {
            nodes,
            normalization: map.normalization,
            whitespace: map.whitespace,
            byte_fallback: map.byte_fallback,
            byte_base_id: map.byte_base_id,
            unk_id: map.unk_id,
        }
    }

    /// `text` as the symbols are matched against it.
    pub fn normalize(&self, text: &str) -> String {
        let n: String = match self.normalization {
            Normalization::Nfkc => text.nfkc().collect(),
            Normalization::Nfc => text.nfc().collect(),
            Normalization::None => text.to_owned(),
        };
        match self.whitespace {
            Whitespace::None => n,
            Whitespace::Sentencepiece => n.replace(' ', "\u{2581}"),
            Whitespace::Gpt2 => n.bytes().map(gpt2_char).collect(),
        }
    }

    /// The ids of `text`.
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        let s = self.normalize(text);
        let mut out = Vec::with_capacity(s.len() / 3 + 1);
        let mut pos = 0;
        while let Some(rest) = s.get(pos..).filter(|r| !r.is_empty()) {
            if let Some((id, n)) = self.longest_at(rest) {
                out.push(id);
                pos += n;
                continue;
            }
            let ch = rest.chars().next().map_or(1, char::len_utf8);
            match rest.get(..ch) {
                Some(c) if self.byte_fallback => {
                    out.extend(c.bytes().map(|b| self.byte_base_id + u32::from(b)));
                }
                _ => out.push(self.unk_id),
            }
            pos += ch;
        }
        out
    }
}

/// GPT-2's byte-to-unicode table: printable bytes (`!`..`~`, `¡`..`¬`,
/// `®`..`ÿ`) stand for themselves; the others, in order, for U+0100 on.
pub fn gpt2_char(b: u8) -> char {
    let printable = |x: u8| matches!(x, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + rank).unwrap_or('\u{FFFD}')
}

impl Tokenizer {
    /// The longest symbol `rest` starts with (ending on a character
    /// boundary), and its length in bytes.
    fn longest_at(&self, rest: &str) -> Option<(u32, usize)> {
        let mut node = self.nodes.first()?;
        let mut best = None;
        for (i, &b) in rest.as_bytes().iter().enumerate() {
            let next = node
                .children
                .binary_search_by_key(&b, |&(c, _)| c)
                .ok()
                .and_then(|k| node.children.get(k))
                .and_then(|&(_, n)| self.nodes.get(n as usize));
            let Some(next) = next else { break };
            node = next;
            if let Some(id) = node.id.filter(|_| rest.is_char_boundary(i + 1)) {
                best = Some((id, i + 1));
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zt_format::atoms::symbols::Symbol;

    fn map(byte_fallback: bool) -> SymbolMap {
        let words = ["a", "ab", "abc", "b", "▁x", "ﬁ"];
        SymbolMap {
            version: 1,
            vocab_size: 300,
            unk_id: 0,
            pad_id: 0,
            bos_id: None,
            eos_id: None,
            byte_fallback,
            byte_base_id: 40,
            normalization: Normalization::Nfkc,
            whitespace: Whitespace::Sentencepiece,
            symbols: words
                .iter()
                .enumerate()
                .map(|(i, w)| Symbol {
                    id: i as u32 + 1,
                    text: (*w).to_owned(),
                    score: None,
                    kind: None,
                })
                .chain([Symbol {
                    id: 9,
                    text: "ab".to_owned(),
                    score: None,
                    kind: None,
                }])
                .collect(),
        }
    }

    #[test]
    fn longest_match_then_bytes_or_unk() {
        let t = Tokenizer::new(&map(true));
        // "abc" whole; "ab" then "a"; " x" is "▁x"; "é" falls back to bytes.
        assert_eq!(t.tokenize("abcaba x"), [3, 2, 1, 5]);
        assert_eq!(t.tokenize("é"), [40 + 0xC3, 40 + 0xA9]);
        // NFKC turns the "ﬁ" ligature into "fi", which no symbol matches.
        assert_eq!(t.tokenize("ﬁ"), [40 + b'f' as u32, 40 + b'i' as u32]);
        assert_eq!(gpt2_char(b' '), 'Ġ');
        assert_eq!(gpt2_char(b'\n'), 'Ċ');
        assert_eq!(gpt2_char(b'a'), 'a');
        let u = Tokenizer::new(&map(false));
        assert_eq!(u.tokenize("é"), [0]);
        assert_eq!(u.tokenize(""), Vec::<u32>::new());
    }
}
