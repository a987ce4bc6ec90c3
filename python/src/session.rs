//! An open source: its manifest, where its bytes come from, and what has
//! arrived. Python's `safe_open` handle wraps one. Every wait releases the
//! GIL and wakes every 100 ms to let Ctrl-C through; the handle may be
//! used from several threads at once.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokio::task::JoinHandle;
use zt_client::Client;
use zt_format::Manifest;

use crate::buffer::Buffer;
use crate::error::{Failure, Kind};
use crate::options::{client_options, ClientArgs};
use crate::process::{runtime, Maker};
use crate::source::Source;
use crate::table::{Part, Table, Waited};

/// A component handed to Python: role, bytes, dtype and logical type.
type PyPart = (String, Buffer, String, Option<String>);

fn to_py(parts: Vec<Part>) -> Vec<PyPart> {
    parts
        .into_iter()
        .map(|p| {
            (
                p.role,
                Buffer::new(p.data),
                p.dtype.name().to_owned(),
                p.logical.map(|l| l.name().to_owned()),
            )
        })
        .collect()
}

#[pyclass(module = "ztserve._native", frozen)]
#[derive(Debug)]
pub(crate) struct Session {
    label: String,
    manifest: Manifest,
    etag: Option<String>,
    size: u64,
    /// `None` once closed (which drops the client and its connections).
    source: Mutex<Option<Source>>,
    table: Arc<Table>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The largest decoded component accepted.
    cap: u64,
    /// The process that opened it: a child forked from it may read the
    /// manifest, but fetches nothing through the parent's connections.
    maker: Maker,
}

#[pymethods]
impl Session {
    /// Opens `source` (a `quic://` or `http(s)://` URL, or a local path,
    /// both through zt-client) and reads its manifest, restricted to
    /// `select` when given; `options` as `ClientArgs` reads them.
    #[staticmethod]
    #[pyo3(signature = (source, select=None, max_buffered_bytes=None, options=None))]
    fn open(
        py: Python<'_>,
        source: String,
        select: Option<Vec<String>>,
        max_buffered_bytes: Option<u64>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Session> {
        let args = ClientArgs::from_dict(options)?;
        let select = select.unwrap_or_default();
        let rt = runtime()?;
        let mut options = client_options(&args)?;
        // A local file is the caller's own: one without digests (a
        // safetensors or GGUF file) is read as it is (docs/python.md).
        options.require_digest &= Client::is_url(&source);
        let max_buffered = max_buffered_bytes.unwrap_or(256 << 20).max(1 << 20);
        let mmap = args.mmap;
        let cap = options.component_cap;
        let at = source.clone();
        // A URL or a local path, read in place, through the same client.
        let (client, remote) = py
            .detach(move || {
                rt.block_on(async move {
                    let client = Client::open(&at, options).await?;
                    let remote = client.manifest_of(&select).await?;
                    Ok::<_, zt_client::Error>((client, remote))
                })
            })
            .map_err(|e| Failure::from(e).into_py())?;
        // A local file has no server and so no ETag of its own.
        let etag = (!client.is_local()).then(|| remote.etag.clone());
        let mut s = Session::new(
            source,
            remote.manifest.clone(),
            etag,
            remote.size,
            Source {
                client: Arc::new(client),
                remote: Arc::new(remote),
                max_buffered,
                mmap,
            },
        );
        s.cap = cap;
        Ok(s)
    }

    /// The object names, in the order their bytes lie in the file.
    fn keys(&self) -> Vec<String> {
        let mut names: Vec<(Option<&str>, u64, &str)> = self
            .manifest
            .objects
            .iter()
            .map(|(name, o)| {
                let first = o.components.values().min_by_key(|c| (&c.file, c.offset));
                let file = first.and_then(|c| c.file.as_deref());
                (file, first.map_or(0, |c| c.offset), name)
            })
            .collect();
        names.sort();
        names.into_iter().map(|(_, _, n)| n.to_owned()).collect()
    }

    /// The manifest as JSON (the server's `ztserve.manifest/1` rendering).
    fn manifest_json(&self) -> String {
        zt_format::manifest_json::manifest_json(&self.manifest).to_string()
    }

    /// Starts fetching `names` in the background; returns the batch that
    /// yields them as they arrive ([`Session::next`]).
    fn start(&self, names: Vec<String>) -> PyResult<u64> {
        self.here()?;
        let mut wanted = Vec::with_capacity(names.len());
        for n in names {
            let o = self.manifest.objects.get(&n).ok_or_else(|| {
                Failure::new(Kind::NotFound, format!("{}: no object {n:?}", self.label)).into_py()
            })?;
            wanted.push((n, o.components.len()));
        }
        let (batch, fetch) = self.table.request(&wanted);
        if !fetch.names.is_empty() {
            let source = self.source.lock().map_err(|_| closed(&self.label))?;
            let Some(source) = source.as_ref() else {
                self.table
                    .close(&format!("{}: the handle was closed", self.label));
                return Err(closed(&self.label));
            };
            let task = source.start(runtime()?, fetch, Arc::clone(&self.table), self.cap);
            if let Ok(mut t) = self.tasks.lock() {
                t.retain(|t| !t.is_finished());
                t.push(task);
            }
        }
        Ok(batch)
    }

    /// Waits for `name` (started before) and takes its components.
    #[pyo3(signature = (name, timeout=None))]
    fn take(&self, py: Python<'_>, name: &str, timeout: Option<f64>) -> PyResult<Vec<PyPart>> {
        self.here()?;
        let deadline = deadline(timeout)?;
        let table = Arc::clone(&self.table);
        let got = py.detach(|| table.take(name, deadline, check_signals))?;
        match got {
            Waited::Got(Ok(parts)) => Ok(to_py(parts)),
            Waited::Got(Err(f)) => Err(f.about(name, None).into_py()),
            Waited::TimedOut => Err(timed_out(name)),
        }
    }

    /// The next object of `batch` to arrive, or `None` when all were yielded.
    #[pyo3(signature = (batch, timeout=None))]
    fn next(
        &self,
        py: Python<'_>,
        batch: u64,
        timeout: Option<f64>,
    ) -> PyResult<Option<(String, Vec<PyPart>)>> {
        self.here()?;
        let deadline = deadline(timeout)?;
        let table = Arc::clone(&self.table);
        let got = py.detach(|| table.next(batch, deadline, check_signals))?;
        match got {
            Waited::Got(None) => Ok(None),
            Waited::Got(Some((name, Ok(parts)))) => Ok(Some((name, to_py(parts)))),
            Waited::Got(Some((name, Err(f)))) => Err(f.about(&name, None).into_py()),
            Waited::TimedOut => Err(timed_out("the next object")),
        }
    }

    /// Rows `start..end` of `name` (a raw dense object), fetched alone
    /// and verified: the data component cut to those rows.
    fn rows(&self, py: Python<'_>, name: &str, start: u64, end: u64) -> PyResult<Vec<PyPart>> {
        self.here()?;
        let rt = runtime()?;
        let rows = zt_format::rows::Rows { start, end };
        let source = self.open_source()?;
        let got = py.detach(|| source.rows(rt, name, rows));
        match got {
            Ok(part) => Ok(to_py(vec![part])),
            Err(f) => Err(f.about(name, Some("data")).into_py()),
        }
    }

    /// Slice `spec` (`START:END` per dimension, as `?slice=` writes it) of
    /// `name` (a raw dense object), fetched alone where the server gathers
    /// it and verified; the slice's data and its shape.
    fn slice(&self, py: Python<'_>, name: &str, spec: &str) -> PyResult<(Vec<PyPart>, Vec<u64>)> {
        self.here()?;
        let rt = runtime()?;
        let slice = zt_format::slice::Slice::parse(spec)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("{name:?}: {e}")))?;
        let source = self.open_source()?;
        let got = py.detach(|| source.slice(rt, name, &slice));
        match got {
            Ok((part, shape)) => Ok((to_py(vec![part]), shape)),
            Err(f) => Err(f.about(name, Some("data")).into_py()),
        }
    }

    /// Forgets a batch nobody reads from any more.
    fn drop_batch(&self, batch: u64) {
        if !self.maker.forked() {
            self.table.drop_batch(batch);
        }
    }

    /// Cancels everything in flight (waiting callers get an error) and
    /// closes the connections; in a forked child, nothing (they are the
    /// parent's).
    fn close(&self) {
        if self.maker.forked() {
            return;
        }
        if let Ok(mut tasks) = self.tasks.lock() {
            for t in tasks.drain(..) {
                t.abort();
            }
        }
        if let Ok(mut source) = self.source.lock() {
            source.take();
        }
        self.table
            .close(&format!("{}: the handle was closed", self.label));
    }

    /// What was opened: the URL or path.
    #[getter]
    fn label(&self) -> &str {
        &self.label
    }

    /// The file's ETag (`None` for a local file).
    #[getter]
    fn etag(&self) -> Option<&str> {
        self.etag.as_deref()
    }

    #[getter]
    fn size(&self) -> u64 {
        self.size
    }

    /// The source format: zt, safetensors, safetensors-index, gguf,
    /// matrix-atom, matrix-atom-pack.
    #[getter]
    fn source(&self) -> &'static str {
        self.manifest.source.name()
    }
}

impl Session {
    fn new(
        label: String,
        manifest: Manifest,
        etag: Option<String>,
        size: u64,
        source: Source,
    ) -> Session {
        Session {
            label,
            manifest,
            etag,
            size,
            source: Mutex::new(Some(source)),
            table: Arc::default(),
            tasks: Mutex::default(),
            cap: zt_format::DEFAULT_DECOMPRESS_CAP,
            maker: Maker::this(),
        }
    }

    /// Refuses a forked child's fetch through the parent's connections.
    fn here(&self) -> PyResult<()> {
        if self.maker.forked() {
            return Err(self.maker.refuse(&self.label));
        }
        Ok(())
    }

    /// The source, while the session is open.
    fn open_source(&self) -> PyResult<Source> {
        self.source
            .lock()
            .ok()
            .and_then(|s| s.as_ref().cloned())
            .ok_or_else(|| closed(&self.label))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.maker.forked() {
            // The parent's connections and tasks: closing them here would
            // close the parent's (over a shared socket) or wait on its
            // runtime. Left, without touching their locks.
            let source = self
                .source
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            let tasks =
                std::mem::take(self.tasks.get_mut().unwrap_or_else(PoisonError::into_inner));
            std::mem::forget((source, tasks));
            return;
        }
        self.close();
    }
}

fn deadline(timeout: Option<f64>) -> PyResult<Option<Instant>> {
    timeout
        .map(|secs| {
            Duration::try_from_secs_f64(secs)
                .map(|d| Instant::now() + d)
                .map_err(|e| PyValueError::new_err(format!("timeout={secs}: {e}")))
        })
        .transpose()
}

fn closed(label: &str) -> PyErr {
    crate::error::Error::new_err(format!("{label}: the handle was closed"))
}

fn timed_out(what: &str) -> PyErr {
    PyTimeoutError::new_err(format!("{what}: timed out"))
}

/// Lets a pending KeyboardInterrupt (or another signal's exception) end a wait.
fn check_signals() -> PyResult<()> {
    Python::attach(|py| py.check_signals())
}
