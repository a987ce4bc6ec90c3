//! An open source: its manifest, where its bytes come from, and what has
//! arrived. Python's `safe_open` handle wraps one. Every wait releases the
//! GIL and wakes every 100 ms to let Ctrl-C through; the handle may be
//! used from several threads at once, and from a child forked after it
//! was opened (which opens the source again for itself: [`Live`]).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zt_client::{Client, Options};
use zt_format::Manifest;

use crate::buffer::Buffer;
use crate::error::{Failure, Kind};
use crate::interrupt;
use crate::live::{closed_why, Live};
use crate::options::{client_options, ClientArgs};
use crate::process::runtime;
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
    /// The largest decoded component accepted.
    cap: u64,
    /// How it was opened, to open it again in a forked child.
    args: ClientArgs,
    /// What this process reads through. Its lock is only taken by a
    /// thread holding the GIL, and let go before the GIL is released (a
    /// child is forked by a thread holding the GIL, so none holds it then).
    live: Mutex<Live>,
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
        let options = options_for(&source, &args)?;
        let max_buffered = max_buffered_bytes.unwrap_or(256 << 20).max(1 << 20);
        let mmap = args.mmap;
        let cap = options.component_cap;
        let at = source.clone();
        // A URL or a local path, read in place, through the same client.
        let selected = select.clone();
        let opened = interrupt::block_on(py, rt, || async move {
            let client = Client::open(&at, options).await?;
            let remote = client.manifest_of(&selected).await?;
            Ok::<_, zt_client::Error>((client, remote))
        })?;
        let (client, remote) = opened.map_err(|e| Failure::from(e).into_py())?;
        // A local file has no server and so no ETag of its own.
        let etag = (!client.is_local()).then(|| remote.etag.clone());
        let (manifest, size) = (remote.manifest.clone(), remote.size);
        let live = Live::new(
            Some(Source {
                client: Arc::new(client),
                remote: Arc::new(remote),
                select: select.into(),
                max_buffered,
                mmap,
            }),
            0,
            &source,
        );
        Ok(Session {
            label: source,
            manifest,
            etag,
            size,
            cap,
            args,
            live: Mutex::new(live),
        })
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
    fn start(&self, py: Python<'_>, names: Vec<String>) -> PyResult<u64> {
        self.start_taking(py, names, None)
    }

    /// `name` fetched (unless it has arrived or is on its way) and taken,
    /// in one call: a caller asking for an object another caller is
    /// waiting for too gets a copy of its own, never an error.
    #[pyo3(signature = (name, timeout=None))]
    fn get(&self, py: Python<'_>, name: String, timeout: Option<f64>) -> PyResult<Vec<PyPart>> {
        // Whatever can fail fails before the caller is counted as a taker.
        let deadline = deadline(timeout)?;
        let table = Arc::clone(&self.live(py)?.table);
        let batch = self.start_taking(py, vec![name.clone()], Some(&name))?;
        self.drop_batch(batch);
        self.take_from(py, &table, &name, deadline, true)
    }

    /// Waits for `name` (started before) and takes its components.
    #[pyo3(signature = (name, timeout=None))]
    fn take(&self, py: Python<'_>, name: &str, timeout: Option<f64>) -> PyResult<Vec<PyPart>> {
        let deadline = deadline(timeout)?;
        let table = Arc::clone(&self.live(py)?.table);
        self.take_from(py, &table, name, deadline, false)
    }

    /// The next object of `batch` to arrive, or `None` when all were yielded.
    #[pyo3(signature = (batch, timeout=None))]
    fn next(
        &self,
        py: Python<'_>,
        batch: u64,
        timeout: Option<f64>,
    ) -> PyResult<Option<(String, Vec<PyPart>)>> {
        let deadline = deadline(timeout)?;
        if self.lock_live().asked_before_fork(batch) {
            // Its objects arrive in the process that asked: ending here
            // would look like the end of the batch.
            return Err(crate::error::Error::new_err(format!(
                "{}: these objects were asked for before this process ({}) was forked, \
                 and arrive in the process that asked; ask again here",
                self.label,
                std::process::id()
            )));
        }
        let table = Arc::clone(&self.live(py)?.table);
        let got = py.detach(|| table.next(batch, deadline, interrupt::check_signals))?;
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
        let rt = runtime()?;
        let rows = zt_format::rows::Rows { start, end };
        let source = self.open_source(py)?;
        let got = interrupt::block_on(py, rt, || source.rows(name, rows))?;
        match got {
            Ok(part) => Ok(to_py(vec![part])),
            Err(f) => Err(f.about(name, Some("data")).into_py()),
        }
    }

    /// Slice `spec` (`START:END` per dimension, as `?slice=` writes it) of
    /// `name` (a raw dense object), fetched alone where the server gathers
    /// it and verified; the slice's data and its shape.
    fn slice(&self, py: Python<'_>, name: &str, spec: &str) -> PyResult<(Vec<PyPart>, Vec<u64>)> {
        let rt = runtime()?;
        let slice = zt_format::slice::Slice::parse(spec)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("{name:?}: {e}")))?;
        let source = self.open_source(py)?;
        let got = interrupt::block_on(py, rt, || source.slice(name, &slice))?;
        match got {
            Ok((part, shape)) => Ok((to_py(vec![part]), shape)),
            Err(f) => Err(f.about(name, Some("data")).into_py()),
        }
    }

    /// Forgets a batch nobody reads from any more (one of a parent's, in
    /// a forked child, is not in this process's table).
    fn drop_batch(&self, batch: u64) {
        let live = self.lock_live();
        if !live.maker.forked() {
            live.table.drop_batch(batch);
        }
    }

    /// Cancels everything in flight (waiting callers get an error) and
    /// closes the connections: this process's own (in a forked child that
    /// never read through the handle, the parent's are left to it).
    fn close(&self) {
        let mut live = self.lock_live();
        if live.maker.forked() {
            let after = live.batches_after();
            live.set_aside(Live::new(None, after, &self.label), false);
        } else {
            live.close(&self.label);
        }
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
    /// [`Session::start`], `taker` naming the one object the caller will
    /// take ([`crate::table::Table::request`]).
    fn start_taking(
        &self,
        py: Python<'_>,
        names: Vec<String>,
        taker: Option<&str>,
    ) -> PyResult<u64> {
        let mut wanted = Vec::with_capacity(names.len());
        for n in names {
            let o = self.manifest.objects.get(&n).ok_or_else(|| {
                Failure::new(Kind::NotFound, format!("{}: no object {n:?}", self.label)).into_py()
            })?;
            wanted.push((n, o.components.len()));
        }
        let mut live = self.live(py)?;
        let source = live.source.clone().ok_or_else(|| closed(&self.label))?;
        let runtime = runtime()?;
        let batch = live.number_batch();
        let fetch = live.table.request(batch, &wanted, taker);
        if !fetch.names.is_empty() {
            let task = source.start(runtime, fetch, Arc::clone(&live.table), self.cap);
            live.track(task);
        }
        Ok(batch)
    }

    /// [`Session::take`] from `table`; `counted` when the caller was
    /// counted among the object's takers as it asked for it.
    fn take_from(
        &self,
        py: Python<'_>,
        table: &Table,
        name: &str,
        deadline: Option<Instant>,
        counted: bool,
    ) -> PyResult<Vec<PyPart>> {
        let got = py.detach(|| table.take(name, counted, deadline, interrupt::check_signals))?;
        match got {
            Waited::Got(Ok(parts)) => Ok(to_py(parts)),
            Waited::Got(Err(f)) => Err(f.about(name, None).into_py()),
            Waited::TimedOut => Err(timed_out(name)),
        }
    }

    fn lock_live(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What this process reads through. In a child forked since the handle
    /// was opened (or last used), the first call sets the parent's aside
    /// (keeping what had arrived and was not taken) and opens the source
    /// again here, pinned to the version it read.
    fn live(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, Live>> {
        let (inherited, after) = {
            let live = self.lock_live();
            if !live.maker.forked() {
                return Ok(live);
            }
            (live.source.clone(), live.batches_after())
        };
        // Connecting lets go of the GIL, so not under the lock.
        let source = inherited
            .map(|parents| self.reopen(py, parents))
            .transpose()?;
        let mut live = self.lock_live();
        // Another thread of this child may have opened it meanwhile: its
        // source is kept, this one dropped.
        if live.maker.forked() {
            let keep_arrived = source.is_some();
            live.set_aside(Live::new(source, after, &self.label), keep_arrived);
        }
        Ok(live)
    }

    /// The source opened again in a forked child, reading the version
    /// the parent's read: every fetch names its ETag, so a file changed
    /// since fails by name instead of mixing versions.
    fn reopen(&self, py: Python<'_>, parents: Source) -> PyResult<Source> {
        let rt = runtime()?;
        let options = options_for(&self.label, &self.args)?;
        let at = self.label.as_str();
        let client = interrupt::block_on(py, rt, || Client::open(at, options))?
            .map_err(|e| Failure::from(e).into_py())?;
        Ok(Source {
            client: Arc::new(client),
            ..parents
        })
    }

    /// The source, while the session is open.
    fn open_source(&self, py: Python<'_>) -> PyResult<Source> {
        self.live(py)?
            .source
            .clone()
            .ok_or_else(|| closed(&self.label))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let live = self.live.get_mut().unwrap_or_else(PoisonError::into_inner);
        if live.maker.forked() {
            let after = live.batches_after();
            live.set_aside(Live::new(None, after, &self.label), false);
        } else {
            live.close(&self.label);
        }
    }
}

/// The client options `args` ask for, reading `source`: a local file is
/// the caller's own, and one without digests (a safetensors or GGUF file)
/// is read as it is (docs/python.md).
fn options_for(source: &str, args: &ClientArgs) -> PyResult<Options> {
    let mut options = client_options(args)?;
    options.require_digest &= Client::is_url(source);
    Ok(options)
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
    crate::error::Error::new_err(closed_why(label))
}

fn timed_out(what: &str) -> PyErr {
    PyTimeoutError::new_err(format!("{what}: timed out"))
}
