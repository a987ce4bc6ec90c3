//! ztserve's Python extension (`ztserve._native`): zt-client and
//! zt-format's readers behind a small API that the pure-Python package
//! (`python/ztserve/`) builds the safetensors-style surface on.
//!
//! - `session`: an open source (URL or local path), its manifest, and
//!   fetches started in the background;
//! - `fetch`: `ztserve.fetch`, zt-client's resumable fetch to a file;
//! - `options`: client options from keyword arguments;
//! - `process`: what a forked child makes afresh (the I/O runtime);
//! - `table`: what has arrived, waited for and taken whole objects at a time;
//! - `source`: the tasks that fetch from a server or read a local file;
//! - `buffer`: the bytes handed to Python, through the buffer protocol
//!   (the crate's only `unsafe`);
//! - `error`: the exception hierarchy.

mod buffer;
mod error;
mod fetch;
mod interrupt;
mod live;
mod options;
mod process;
mod session;
mod source;
mod table;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    zt_client::trust::install_provider();
    process::loaded();
    let py = m.py();
    m.add_class::<session::Session>()?;
    m.add_class::<buffer::Buffer>()?;
    m.add_function(wrap_pyfunction!(fetch::fetch, m)?)?;
    m.add("Error", py.get_type::<error::Error>())?;
    m.add("ConnectError", py.get_type::<error::ConnectError>())?;
    m.add("NotFoundError", py.get_type::<error::NotFoundError>())?;
    m.add("RefusedError", py.get_type::<error::RefusedError>())?;
    m.add("IntegrityError", py.get_type::<error::IntegrityError>())?;
    m.add("ProtocolError", py.get_type::<error::ProtocolError>())?;
    Ok(())
}
