//! `zt cat`: a component's bytes on standard output.

use std::io::Write;

use anyhow::Result;
use zt_format::ZtFile;

/// Writes the decoded bytes (or with `stored`, the stored bytes) of one component.
pub fn run(
    out: &mut impl Write,
    file: &ZtFile,
    object: &str,
    component: &str,
    stored: bool,
) -> Result<()> {
    if stored {
        out.write_all(file.stored(object, component)?)?;
    } else {
        out.write_all(&file.read(object, component)?)?;
    }
    out.flush()?;
    Ok(())
}
