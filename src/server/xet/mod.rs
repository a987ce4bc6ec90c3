//! The Xet protocol, the way `huggingface_hub` (through `hf_xet`)
//! downloads large files from the Hub: a file is cut into content-defined
//! chunks, the chunks are grouped into xorbs, and a client asks for a
//! file's reconstruction (which byte ranges of which xorbs make it) and
//! fetches those ranges in parallel.
//!
//! May use: nothing of the daemon's (a leaf: `http/hub/xet/` reads the
//! files and hands their bytes in).

pub(crate) mod chunks;
pub(crate) mod hashes;
pub(crate) mod index;
pub(crate) mod kept;
