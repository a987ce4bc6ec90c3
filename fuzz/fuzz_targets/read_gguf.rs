#![no_main]
//! Arbitrary bytes as a GGUF file: the growing read plan, metadata of every
//! value type, tensor infos, synthesized string arrays, every object read.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    zt_format::fuzz::read_gguf(data);
});
