//! The Xet protocol, the way `huggingface_hub` (through `hf_xet`)
//! downloads large files from the Hub: a file is cut into content-defined
//! chunks, the chunks are grouped into xorbs, and a client asks for a
//! file's reconstruction (which byte ranges of which xorbs make it) and
//! fetches those ranges in parallel.

pub(crate) mod chunks;
pub(crate) mod hashes;
pub(crate) mod index;
pub(crate) mod kept;
