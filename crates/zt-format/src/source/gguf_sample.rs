//! A small GGUF v3 writer and a sample file, for the GGUF reader's unit
//! tests and the fuzz seeds and replay (`fuzz::gguf_sample`).
#![allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::cast_possible_truncation
)]

/// A minimal GGUF v3 writer.
pub(crate) struct W(pub(crate) Vec<u8>);

impl W {
    pub(crate) fn new(tensors: u64, kvs: u64) -> W {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(tensors.to_le_bytes());
        b.extend(kvs.to_le_bytes());
        W(b)
    }
    pub(crate) fn s(&mut self, s: &str) {
        self.0.extend((s.len() as u64).to_le_bytes());
        self.0.extend(s.as_bytes());
    }
    pub(crate) fn kv_u32(&mut self, k: &str, v: u32) {
        self.s(k);
        self.0.extend(4u32.to_le_bytes());
        self.0.extend(v.to_le_bytes());
    }
    pub(crate) fn kv_str(&mut self, k: &str, v: &str) {
        self.s(k);
        self.0.extend(8u32.to_le_bytes());
        self.s(v);
    }
    pub(crate) fn kv_strs(&mut self, k: &str, v: &[String]) {
        self.s(k);
        self.0.extend(9u32.to_le_bytes());
        self.0.extend(8u32.to_le_bytes());
        self.0.extend((v.len() as u64).to_le_bytes());
        for x in v {
            self.s(x);
        }
    }
    pub(crate) fn kv_f32s(&mut self, k: &str, v: &[f32]) {
        self.s(k);
        self.0.extend(9u32.to_le_bytes());
        self.0.extend(6u32.to_le_bytes());
        self.0.extend((v.len() as u64).to_le_bytes());
        for x in v {
            self.0.extend(x.to_le_bytes());
        }
    }
    pub(crate) fn tensor(&mut self, name: &str, dims: &[u64], t: u32, off: u64) {
        self.s(name);
        self.0.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            self.0.extend(d.to_le_bytes());
        }
        self.0.extend(t.to_le_bytes());
        self.0.extend(off.to_le_bytes());
    }
    pub(crate) fn data(mut self, align: usize, blobs: &[usize]) -> Vec<u8> {
        let start = self.0.len().next_multiple_of(align);
        self.0.resize(start, 0);
        for (i, n) in blobs.iter().enumerate() {
            let at = self.0.len().next_multiple_of(align);
            self.0.resize(at, 0);
            self.0.extend((0..*n).map(|j| (i * 31 + j) as u8));
        }
        self.0
    }
}

pub(crate) fn tokens() -> Vec<String> {
    (0..40).map(|i| format!("tok{i}▁")).collect()
}

/// Three tensors (f32, q8_0, i8), four metadata entries, two long arrays.
pub(crate) fn sample() -> Vec<u8> {
    let mut w = W::new(3, 4);
    w.kv_str("general.architecture", "llama");
    w.kv_u32("general.alignment", 64);
    w.kv_strs("tokenizer.ggml.tokens", &tokens());
    w.kv_f32s(
        "tokenizer.ggml.scores",
        &(0..20).map(|i| i as f32).collect::<Vec<_>>(),
    );
    // f32 [3, 2] (GGUF dims 2, 3), q8_0 of 64 elements (2 blocks), i8 [5].
    w.tensor("blk.0.w", &[2, 3], 0, 0);
    w.tensor("blk.0.q", &[64], 8, 64);
    w.tensor("blk.1.i", &[5], 24, 192);
    w.data(64, &[24, 68, 5])
}

/// `n` i8 tensors of `len` elements each, at GGUF's default alignment
/// (32): a gap of padding after each one whose length is not a multiple
/// of it.
#[cfg(feature = "fuzzing")]
pub(crate) fn of_small_tensors(n: usize, len: usize) -> Vec<u8> {
    let mut w = W::new(n as u64, 1);
    w.kv_str("general.architecture", "llama");
    let step = len.next_multiple_of(32) as u64;
    for i in 0..n {
        w.tensor(&format!("blk.{i}.w"), &[len as u64], 24, i as u64 * step);
    }
    w.data(32, &vec![len; n])
}
