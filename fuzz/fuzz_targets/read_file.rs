#![no_main]
//! Arbitrary bytes into the reader: open, validate, verify, read every component.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    zt_format::fuzz::read_everything(data);
});
