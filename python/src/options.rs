//! What every remote call shares: the client options built from the
//! Python keyword arguments.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zt_client::cache::Cache;
use zt_client::trust::Trust;
use zt_client::Options;

use crate::process::CACHES;

/// The keyword options `safe_open`, `load` and `fetch` share, passed
/// down as a dict.
#[derive(Debug)]
pub(crate) struct ClientArgs {
    /// Refuse bytes without a digest (`True`), or accept them unverified.
    pub(crate) verify: bool,
    pub(crate) token: Option<String>,
    pub(crate) insecure: bool,
    pub(crate) cert_fingerprint: Option<String>,
    pub(crate) ca: Option<String>,
    pub(crate) connections: Option<usize>,
    /// Seconds a server may stay silent before the connection counts as lost.
    pub(crate) timeout: Option<f64>,
    /// Largest UDP datagram payload ztp/1 may grow to.
    pub(crate) max_udp_payload: Option<u16>,
    /// Seconds a request waits out a busy server's refusals in all.
    pub(crate) busy_wait: Option<f64>,
    /// Take components from the cache and store them in it (`True`).
    pub(crate) cache: bool,
    /// The cache's folder (default: `Cache::default_dir`).
    pub(crate) cache_dir: Option<String>,
    /// The cache's size bound, in bytes, or a size such as "64G".
    pub(crate) cache_max: Option<String>,
    /// Hand cached components over as copy-on-write mappings of the
    /// cache's files (`safe_open` and `load` only).
    pub(crate) mmap: bool,
}

impl ClientArgs {
    /// The options in `dict` (absent ones default; `verify` to `True`);
    /// an unknown key is a `TypeError` naming it.
    pub(crate) fn from_dict(dict: Option<&Bound<'_, PyDict>>) -> PyResult<ClientArgs> {
        let mut a = ClientArgs {
            verify: true,
            token: None,
            insecure: false,
            cert_fingerprint: None,
            ca: None,
            connections: None,
            timeout: None,
            max_udp_payload: None,
            busy_wait: None,
            cache: true,
            cache_dir: None,
            cache_max: None,
            mmap: false,
        };
        let Some(dict) = dict else { return Ok(a) };
        for (k, v) in dict.iter() {
            let key: String = k.extract()?;
            if v.is_none() {
                continue;
            }
            match key.as_str() {
                "verify" => a.verify = v.extract()?,
                "token" => a.token = Some(v.extract()?),
                "insecure" => a.insecure = v.extract()?,
                "cert_fingerprint" => a.cert_fingerprint = Some(v.extract()?),
                "ca" => a.ca = Some(v.extract()?),
                "connections" => a.connections = Some(v.extract()?),
                "timeout" => a.timeout = Some(v.extract()?),
                "max_udp_payload" => a.max_udp_payload = Some(v.extract()?),
                "busy_wait" => a.busy_wait = Some(v.extract()?),
                "cache" => a.cache = v.extract()?,
                "cache_dir" => a.cache_dir = Some(v.str()?.to_string()),
                "cache_max" => a.cache_max = Some(v.str()?.to_string()),
                "mmap" => a.mmap = v.extract()?,
                other => return Err(PyTypeError::new_err(format!("unknown option {other:?}"))),
            }
        }
        Ok(a)
    }
}

pub(crate) fn client_options(a: &ClientArgs) -> PyResult<Options> {
    let mut options = Options {
        token: a.token.clone(),
        require_digest: a.verify,
        allow_unverified: !a.verify,
        ..Options::default()
    };
    options.trust = match (a.insecure, &a.cert_fingerprint, &a.ca) {
        (true, _, _) => Trust::Insecure,
        (false, Some(fp), _) => {
            Trust::fingerprint(fp).map_err(|e| PyValueError::new_err(e.to_string()))?
        }
        (false, None, Some(ca)) => Trust::Ca(ca.into()),
        (false, None, None) => Trust::System,
    };
    if let Some(n) = a.connections {
        if n == 0 {
            return Err(PyValueError::new_err(
                "connections=0: a fetch needs at least one connection",
            ));
        }
        options.connections = Some(n);
    }
    if let Some(p) = a.max_udp_payload {
        zt_client::udp::check_payload(p)
            .map_err(|e| PyValueError::new_err(format!("max_udp_payload={p}: {e}")))?;
        options.max_udp_payload = Some(p);
    }
    if let Some(secs) = a.timeout {
        let t = Duration::try_from_secs_f64(secs)
            .map_err(|e| PyValueError::new_err(format!("timeout={secs}: {e}")))?;
        options.idle_timeout = t;
        options.silence_timeout = 2 * t;
    }
    if let Some(secs) = a.busy_wait {
        options.busy_wait = Duration::try_from_secs_f64(secs)
            .map_err(|e| PyValueError::new_err(format!("busy_wait={secs}: {e}")))?;
    }
    options.cache = cache(a)?;
    Ok(options)
}

/// The cache the options name, one per folder and bound in the process
/// (so its running size is kept once): `None` with `cache=False`, when
/// `ZTSERVE_CACHE` is off, or when the default folder cannot be made (a
/// folder named by `cache_dir=` that cannot be made is an error).
fn cache(a: &ClientArgs) -> PyResult<Option<Cache>> {
    if !a.cache {
        return Ok(None);
    }
    let max = match &a.cache_max {
        Some(text) => zt_client::cache::parse_size(text)
            .map_err(|e| PyValueError::new_err(format!("cache_max: {e}")))?,
        None => Cache::default_max_bytes().map_err(PyValueError::new_err)?,
    };
    let Some(dir) = a
        .cache_dir
        .as_ref()
        .map(PathBuf::from)
        .or_else(Cache::default_dir)
    else {
        return Ok(None);
    };
    // This process's table: a parent's caches are never reused in a child
    // (an I/O thread of the parent may have held one's usage lock, taken
    // without the GIL, at the fork).
    let mut open = CACHES
        .get(|| Ok(Mutex::default()))?
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(c) = open.iter().find(|c| c.dir() == dir && c.max_bytes() == max) {
        return Ok(Some(c.clone()));
    }
    match Cache::open(&dir, max) {
        Ok(c) => {
            open.push(c.clone());
            Ok(Some(c))
        }
        Err(e) if a.cache_dir.is_some() => Err(crate::error::Error::new_err(format!(
            "cache_dir={}: {e}",
            dir.display()
        ))),
        Err(_) => Ok(None),
    }
}
