//! The symbol map (`pi_symbol_map.json`, seed 002 section 3.1): the
//! vocabulary a tokenizer matches against, with the ids it falls back to.
//! Version 1, with our additions (docs/matrix-atom.md): `bos_id`,
//! `eos_id`, per-symbol `score` and `type` (from GGUF), and `whitespace`,
//! how spaces (and bytes) are spelled in the symbols (`none`;
//! `sentencepiece`: a space is `▁`; `gpt2`: every byte by GPT-2's table).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::ingest::PackFileError;

type Result<T> = std::result::Result<T, PackFileError>;

/// One entry: an id and its text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Symbol {
    pub id: u32,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<i32>,
}

/// How the symbols spell a space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Whitespace {
    /// As a space.
    #[default]
    None,
    /// As `▁` (U+2581), SentencePiece's convention (llama's SPM vocab).
    Sentencepiece,
    /// Every UTF-8 byte as GPT-2's byte-to-unicode table spells it (a
    /// space is `Ġ`), the convention of GPT-2 style BPE vocabularies.
    Gpt2,
}

/// Unicode normalization applied before matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Normalization {
    #[default]
    Nfkc,
    Nfc,
    None,
}

/// A symbol map, version 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SymbolMap {
    pub version: u32,
    pub vocab_size: u32,
    pub unk_id: u32,
    pub pad_id: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos_id: Option<u32>,
    pub byte_fallback: bool,
    #[serde(default)]
    pub byte_base_id: u32,
    #[serde(default)]
    pub normalization: Normalization,
    #[serde(default)]
    pub whitespace: Whitespace,
    pub symbols: Vec<Symbol>,
}

impl SymbolMap {
    /// Reads and checks a map from its JSON; `label` names it in errors.
    pub fn from_json(label: &str, json: &[u8]) -> Result<SymbolMap> {
        let map: SymbolMap = serde_json::from_slice(json)
            .map_err(|e| PackFileError::new(label, format!("not a symbol map: {e}")))?;
        map.check(label)?;
        Ok(map)
    }

    /// The map as JSON, in a stable layout (what `hash` covers).
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// The rules: version 1, ids unique and below `vocab_size` (the
    /// special ids too), byte fallback's 256 ids inside the vocabulary.
    pub fn check(&self, label: &str) -> Result<()> {
        let bad = |why: String| Err(PackFileError::new(label, why));
        if self.version != 1 {
            return bad(format!("version {}; this reader knows 1", self.version));
        }
        let within = |name: &str, id: u32| {
            if id >= self.vocab_size {
                Err(PackFileError::new(
                    label,
                    format!("{name} {id} is outside vocab_size {}", self.vocab_size),
                ))
            } else {
                Ok(())
            }
        };
        within("unk_id", self.unk_id)?;
        within("pad_id", self.pad_id)?;
        if let Some(b) = self.bos_id {
            within("bos_id", b)?;
        }
        if let Some(e) = self.eos_id {
            within("eos_id", e)?;
        }
        if self.byte_fallback {
            within("byte_base_id + 255", self.byte_base_id.saturating_add(255))?;
        }
        let mut seen = HashSet::with_capacity(self.symbols.len());
        for s in &self.symbols {
            within(&format!("symbol {:?}'s id", s.text), s.id)?;
            if !seen.insert(s.id) {
                return bad(format!("id {} is given twice", s.id));
            }
        }
        Ok(())
    }
}
