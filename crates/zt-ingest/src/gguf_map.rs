//! A symbol map from a GGUF model's tokenizer (`zt ingest tokenizer
//! --from-gguf`): `tokenizer.ggml.tokens` in GGUF's order exactly (id =
//! index), with `scores`, `token_type`, and the bos, eos, unknown and
//! padding ids. Byte tokens `<0x00>`...`<0xFF>` at 256 consecutive ids
//! set `byte_fallback` and `byte_base_id`. The whitespace convention
//! follows `tokenizer.ggml.model`: `llama` (SentencePiece) spells a space
//! `▁`; `gpt2` spells every UTF-8 byte with GPT-2's byte-to-unicode table
//! (a space is `Ġ`); others are matched as they are.

use std::path::Path;

use zt_format::CborValue;
use zt_format::{ReadOptions, ZtFile};

use crate::error::{Error, Result};
use zt_format::atoms::symbols::{Normalization, Symbol, SymbolMap, Whitespace};

fn read_u64s(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect()
}

/// The symbol map of the GGUF file at `path`.
pub fn from_gguf(path: &Path) -> Result<SymbolMap> {
    let label = path.display().to_string();
    let file = ZtFile::open_with(path, ReadOptions::default())
        .map_err(|e| Error::map(&label, e.to_string()))?;
    let m = file.manifest();
    let tokens = "@tokenizer.ggml.tokens";
    let read = |object: &str, role: &str| {
        file.read(object, role)
            .map(|d| d.to_vec())
            .map_err(|e| Error::map(&label, e.to_string()))
    };
    if !m.objects.contains_key(tokens) {
        return Err(Error::map(
            &label,
            "no tokenizer.ggml.tokens array (not a model with a vocabulary)",
        ));
    }
    let offsets = read_u64s(&read(tokens, "offsets")?);
    let values = read(tokens, "values")?;
    let mut texts = Vec::with_capacity(offsets.len().saturating_sub(1));
    for w in offsets.windows(2) {
        let (a, b) = (
            usize::try_from(w[0]).unwrap_or(usize::MAX),
            usize::try_from(w[1]).unwrap_or(usize::MAX),
        );
        let bytes = values
            .get(a..b)
            .ok_or_else(|| Error::map(&label, "a token runs past the token bytes"))?;
        texts.push(String::from_utf8_lossy(bytes).into_owned());
    }
    let floats = |name: &str| -> Option<Vec<f32>> {
        let b = file.read(name, "data").ok()?;
        Some(
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
                .collect(),
        )
    };
    let ints = |name: &str| -> Option<Vec<i32>> {
        let b = file.read(name, "data").ok()?;
        Some(
            b.chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
                .collect(),
        )
    };
    let scores = floats("@tokenizer.ggml.scores");
    let types = ints("@tokenizer.ggml.token_type");
    let attr_id = |key: &str| match m.attributes.get(key) {
        Some(CborValue::Integer(i)) => u32::try_from(u64::try_from(*i).ok()?).ok(),
        _ => None,
    };
    let vocab_size =
        u32::try_from(texts.len()).map_err(|_| Error::map(&label, "more than 2^32 tokens"))?;
    let unk_id = attr_id("tokenizer.ggml.unknown_token_id").unwrap_or(0);
    let byte_base = texts.iter().position(|t| t == "<0x00>");
    let byte_base = byte_base.filter(|&base| {
        (0..256usize)
            .all(|b| texts.get(base + b).map(String::as_str) == Some(&format!("<0x{b:02X}>")))
    });
    let whitespace = match m.attributes.get("tokenizer.ggml.model") {
        Some(CborValue::Text(t)) if t == "llama" => Whitespace::Sentencepiece,
        Some(CborValue::Text(t)) if t == "gpt2" => Whitespace::Gpt2,
        _ => Whitespace::None,
    };
    let symbols = texts
        .into_iter()
        .enumerate()
        .map(|(i, text)| Symbol {
            id: i as u32,
            text,
            score: scores.as_ref().and_then(|s| s.get(i).copied()),
            kind: types.as_ref().and_then(|t| t.get(i).copied()),
        })
        .collect();
    let map = SymbolMap {
        version: 1,
        vocab_size,
        unk_id,
        pad_id: attr_id("tokenizer.ggml.padding_token_id").unwrap_or(unk_id),
        bos_id: attr_id("tokenizer.ggml.bos_token_id"),
        eos_id: attr_id("tokenizer.ggml.eos_token_id"),
        byte_fallback: byte_base.is_some(),
        byte_base_id: byte_base.map_or(0, |b| b as u32),
        normalization: Normalization::Nfkc,
        whitespace,
        symbols,
    };
    map.check(&label)?;
    Ok(map)
}
