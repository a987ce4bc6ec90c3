#![no_main]
//! Arbitrary bytes as a MATRIX-ATOM file (header, payload CRC and ids,
//! document index, the source's manifest) and as an SVG-Tensor file.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    zt_format::fuzz::read_atoms(data);
});
