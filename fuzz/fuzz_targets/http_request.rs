#![no_main]
//! Arbitrary request lines and headers through the daemon's router (no
//! socket) over a small served tree: no internal errors, and every body
//! matches what its headers announce.

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ztserve::server::http_fuzz::Harness;

static HARNESS: OnceLock<Harness> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    HARNESS.get_or_init(Harness::new).run(data);
});
