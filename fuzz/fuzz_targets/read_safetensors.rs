#![no_main]
//! Arbitrary bytes as a safetensors file: header, validation, every tensor.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    zt_format::fuzz::read_safetensors(data);
});
