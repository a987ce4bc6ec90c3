//! `ztserve.fetch`: what `zt fetch` does, from Python: the selected
//! objects written to a `.zt` file (or a byte-identical copy named after
//! the source), resumable, every component verified, renamed into place
//! only when complete.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use zt_client::{sharded, Client};

use crate::error::Failure;
use crate::interrupt;
use crate::options::{client_options, ClientArgs};
use crate::process::runtime;

/// Fetches `select` (every object when empty) of `url` into `output`;
/// `progress(name, done_bytes, total_bytes)` is called as components
/// land. Returns what was written.
#[pyfunction]
#[pyo3(signature = (url, output, select=None, progress=None, options=None))]
pub(crate) fn fetch<'py>(
    py: Python<'py>,
    url: String,
    output: PathBuf,
    select: Option<Vec<String>>,
    progress: Option<Py<PyAny>>,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let options = client_options(&ClientArgs::from_dict(options)?)?;
    let select = select.unwrap_or_default();
    let rt = runtime()?;
    let written = interrupt::block_on(py, rt, || async {
        let client = Client::connect(&url, options).await?;
        let mut report = |name: &str, done: u64, total: u64| {
            if let Some(cb) = &progress {
                Python::attach(|py| {
                    if let Err(e) = cb.call1(py, (name, done, total)) {
                        interrupt::callback_failed(py, e, cb.bind(py));
                    }
                });
            }
        };
        let written = sharded::fetch_to_path(&client, &select, &output, &mut report).await;
        client.close().await;
        written
    })?
    .map_err(|e| Failure::from(e).into_py())?;
    let out = PyDict::new(py);
    out.set_item("path", written.path)?;
    out.set_item("objects", written.objects)?;
    out.set_item("bytes", written.bytes)?;
    out.set_item("resumed", written.resumed)?;
    Ok(out)
}
