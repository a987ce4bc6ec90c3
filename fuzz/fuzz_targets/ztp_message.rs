#![no_main]
//! Arbitrary bytes into the ztp/1 deframer, as control messages and as
//! component headers, split into pieces; what decodes must round-trip.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ztp_proto::fuzz::decode_everything(data);
});
