//! The bodies of the `read_file`, `read_safetensors` and `read_gguf` fuzz
//! targets, shared with the corpus replay test.

use crate::{Limits, ReadOptions, Verify, ZtFile};

/// Opens `data` as a `.zt` file and reads everything in it, under small
/// caps. Any panic, or an allocation past the caps, is a bug.
#[doc(hidden)]
pub fn read_everything(data: &[u8]) {
    read_everything_as("fuzz.zt", data);
}

/// The same for `data` as a safetensors file, read through its source's
/// read plan.
#[doc(hidden)]
pub fn read_safetensors(data: &[u8]) {
    read_everything_as("fuzz.safetensors", data);
}

/// The same for `data` as a GGUF file.
#[doc(hidden)]
pub fn read_gguf(data: &[u8]) {
    read_everything_as("fuzz.gguf", data);
}

/// A small valid GGUF file (three tensors, metadata, a long string array
/// and a long number array): a fuzz seed and a test fixture.
#[doc(hidden)]
pub fn gguf_sample() -> Vec<u8> {
    crate::source::gguf::sample::sample()
}

/// Opens `data` as the file `label` names (its extension picks the
/// source) and reads everything in it.
fn read_everything_as(label: &str, data: &[u8]) {
    for verify in [Verify::Digests, Verify::Skip] {
        let options = ReadOptions {
            limits: Limits {
                manifest_cap: 1 << 20,
                decompress_cap: 1 << 20,
                ..Limits::default()
            },
            verify,
        };
        let Ok(file) = ZtFile::from_bytes(label, data, options) else {
            return;
        };
        let _ = file.verify();
        let names: Vec<(String, String)> = file
            .manifest()
            .components()
            .map(|(o, c, _)| (o.to_owned(), c.to_owned()))
            .collect();
        for (o, c) in names {
            if let Ok(t) = file.component_tensor(&o, &c) {
                let _ = t.as_bools();
                let _ = t.as_slice::<f32>();
            }
        }
        let _ = crate::manifest_cbor(file.manifest());
    }
}
