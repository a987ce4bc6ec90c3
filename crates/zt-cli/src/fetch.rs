//! `zt fetch` and remote `zt info`: the client library on the command line.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};

use zt_client::cache::Cache;
use zt_client::trust::Trust;
use zt_client::{Client, Options, Via};

/// Flags shared by every remote subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct RemoteArgs {
    /// Accept any server certificate (tests and trusted networks only)
    #[arg(long)]
    pub insecure: bool,
    /// Trust exactly the server certificate with this SHA-256 fingerprint (hex)
    #[arg(long, value_name = "SHA256")]
    pub cert_fingerprint: Option<String>,
    /// Trust server certificates signed by the CAs in this PEM file, or
    /// that are themselves in it (a self-signed one, as if pinned)
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Bearer token
    #[arg(long, env = "ZT_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Transport, overriding the URL's scheme
    #[arg(long, value_parser = ["quic", "http"])]
    pub via: Option<String>,
    /// Connections per fetch: parallel Range requests over HTTP (default
    /// 8), QUIC connections over ztp/1, each carrying a share of the
    /// components in layer order, balanced by bytes (default: one for each
    /// two cores, 2 to 8; more than 64 count as 64)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub connections: Option<u16>,
    /// Most MiB a fetch holds received ahead of its file writer
    #[arg(long, value_name = "MIB", default_value_t = zt_client::Options::default().write_ahead >> 20)]
    pub write_ahead_mib: u64,
    /// Addresses of a host name instead of resolving it, as curl's
    /// (repeatable); `zt fetch` tries each address of a name as a mirror
    #[arg(long = "resolve", value_name = "HOST:PORT:ADDR[,ADDR...]", value_parser = zt_client::Resolve::parse)]
    pub resolve: Vec<zt_client::Resolve>,
    /// Largest UDP datagram payload ztp/1 may grow to, in bytes (1200 to
    /// 6500, or 32000 to 65507 towards a loopback server, as far as the
    /// interface carries them; default: what the interfaces carry)
    #[arg(long, value_name = "BYTES", value_parser = udp_payload)]
    pub max_udp_payload: Option<u16>,
    /// Seconds, at most, from its first refusal, that a request the
    /// server refuses as busy (with a wait to retry after) is sent again,
    /// each time after the server's wait (at least 250 ms, doubling) and a
    /// random part of it; 0 reports the first refusal. With mirrors, a
    /// busy server hands the fetch on at once; the last is waited on
    #[arg(long, value_name = "SECS", default_value_t = zt_client::BUSY_WAIT.as_secs())]
    pub busy_wait: u64,
    /// The cache of components, reused by digest [default: $ZTSERVE_CACHE,
    /// else ~/.cache/ztserve]
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Neither take components from the cache nor store them in it
    #[arg(long, conflicts_with = "cache_dir")]
    pub no_cache: bool,
    /// The cache's size bound (K, M, G, T) [default: $ZTSERVE_CACHE_MAX, else 64G]
    #[arg(long, value_name = "SIZE", value_parser = zt_client::cache::parse_size)]
    pub cache_max: Option<u64>,
}

/// What `zt fetch` accepts besides verified components.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct AcceptArgs {
    /// Refuse components that carry no digest (exit 3)
    #[arg(long)]
    pub require_digest: bool,
    /// Accept components whose digest algorithm is unknown
    #[arg(long)]
    pub allow_unverified: bool,
}

impl RemoteArgs {
    pub fn options(&self, accept: AcceptArgs) -> Result<Options> {
        let trust = match (self.insecure, &self.cert_fingerprint, &self.ca) {
            (true, None, None) => Trust::Insecure,
            (false, Some(f), None) => Trust::fingerprint(f)?,
            (false, None, Some(ca)) => Trust::Ca(ca.clone()),
            (false, None, None) => Trust::System,
            _ => bail!("choose one of --insecure, --cert-fingerprint and --ca"),
        };
        Ok(Options {
            trust,
            token: self.token.clone(),
            connections: self.connections.map(usize::from),
            write_ahead: self.write_ahead_mib.max(1) << 20,
            resolve: self.resolve.clone(),
            max_udp_payload: self.max_udp_payload,
            busy_wait: std::time::Duration::from_secs(self.busy_wait),
            allow_unverified: accept.allow_unverified,
            require_digest: accept.require_digest,
            via: self
                .via
                .as_deref()
                .map(|v| if v == "quic" { Via::Quic } else { Via::Http }),
            cache: self.cache()?,
            ..Options::default()
        })
    }

    /// The cache these arguments name: `None` with `--no-cache`, or when
    /// it cannot be opened (said on stderr; the fetch goes on without it).
    pub fn cache(&self) -> Result<Option<Cache>> {
        if self.no_cache {
            return Ok(None);
        }
        let Some(dir) = self.cache_dir.clone().or_else(Cache::default_dir) else {
            return Ok(None);
        };
        let max = match self.cache_max {
            Some(m) => m,
            None => Cache::default_max_bytes().map_err(anyhow::Error::msg)?,
        };
        match Cache::open(&dir, max) {
            Ok(c) => Ok(Some(c)),
            Err(e) => {
                eprintln!("zt: not caching: {}: {e}", dir.display());
                Ok(None)
            }
        }
    }
}

/// `--max-udp-payload`: a bound [`zt_client::udp::check_payload`] accepts.
fn udp_payload(text: &str) -> Result<u16, String> {
    let p: u16 = text
        .parse()
        .map_err(|e| format!("{text:?} is not a number of bytes: {e}"))?;
    zt_client::udp::check_payload(p)
}

/// The default output name: the last segment of the URL's path, decoded
/// (`caf%C3%A9.zt` is written as `café.zt`, the name the server has).
pub fn default_output(url: &str) -> PathBuf {
    PathBuf::from(zt_client::url_path::file_name(url).unwrap_or_else(|| "fetched.zt".to_owned()))
}

/// Runs `zt fetch`: from `urls[0]`, going on from the next URL (a
/// mirror) when a server fails.
pub async fn run(
    urls: &[String],
    out: &Path,
    select: &[String],
    args: &RemoteArgs,
    accept: AcceptArgs,
    direct_io: bool,
) -> Result<()> {
    let mut options = Options {
        direct_io,
        ..args.options(accept)?
    };
    // Stored as the output is written: with direct I/O unless --no-direct-io.
    options.cache = options.cache.map(|c| c.direct_io(direct_io));
    let bar = if std::io::stderr().is_terminal() {
        let b = ProgressBar::new(0);
        if let Ok(s) = ProgressStyle::with_template(
            "{bar:30} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}",
        ) {
            b.set_style(s);
        }
        b
    } else {
        ProgressBar::hidden()
    };
    let mut progress = |object: &str, got: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(got);
        match zt_format::layer_index(object) {
            Some(l) => bar.set_message(format!("layer {l}")),
            None => bar.set_message(object.to_owned()),
        }
    };
    let mut failed = |url: &str, e: &zt_client::Error, next: &str| {
        bar.suspend(|| eprintln!("{url}: {e}; going on from {next}"));
    };
    let written = zt_client::mirrors::fetch_to_path_from(
        urls,
        &options,
        select,
        out,
        &mut progress,
        &mut failed,
    )
    .await;
    bar.finish_and_clear();
    let w = written?;
    if w.resumed > 0 {
        eprintln!(
            "{}: {} objects ({} components resumed from the journal)",
            w.path.display(),
            w.objects,
            w.resumed
        );
    }
    Ok(())
}

/// `zt fetch URL --atoms I..J -o OUT`: atoms `[I, J)` of a MATRIX-ATOM
/// file (a row range of its `atoms`, verified), with the file's document
/// index rebased, written atomically as a MATRIX-ATOM file of their own.
pub async fn atoms(
    url: &str,
    out: &Path,
    range: &str,
    args: &RemoteArgs,
    accept: AcceptArgs,
) -> Result<()> {
    use crate::exit::{Failure, USAGE};
    let bad = || {
        Failure::new(
            USAGE,
            format!("--atoms {range:?}: give I..J (half-open), e.g. 0..128"),
        )
    };
    let (i, j) = range.split_once("..").ok_or_else(bad)?;
    let (start, end): (u64, u64) = (i.parse().map_err(|_| bad())?, j.parse().map_err(|_| bad())?);
    let client = Client::connect(url, args.options(accept)?).await?;
    let remote = client.manifest().await?;
    let header = zt_format::source::atom_header(&remote.manifest).ok_or_else(|| {
        Failure::new(
            USAGE,
            format!("{url}: not a MATRIX-ATOM file (its manifest has no atom header)"),
        )
    })?;
    let rows = zt_format::rows::Rows { start, end };
    let atoms = client.read_rows(&remote, "atoms", rows).await?;
    let docs = if remote.manifest.objects.contains_key("documents") {
        let mut f = client
            .fetch(&["documents".to_owned()], Some(&remote.etag))
            .await?;
        let d = f
            .next()
            .await
            .ok_or_else(|| anyhow::anyhow!("{url}: the document index did not arrive"))??;
        let v: Vec<u64> = d
            .data
            .as_slice()
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        Some(
            v.chunks_exact(3)
                .map(|t| zt_format::atoms::index::DocEntry {
                    first_atom: t[0],
                    atom_count: t[1],
                    token_count: t[2],
                })
                .collect::<Vec<_>>(),
        )
    } else {
        None
    };
    client.close().await;
    let bytes =
        zt_format::atoms::slice::cut(&header, docs.as_deref(), start, end, atoms.data.as_slice());
    crate::ingest::write_file(out, &bytes, "writing the atoms")?;
    eprintln!(
        "{}: atoms {start}..{end} ({} bytes)",
        out.display(),
        bytes.len()
    );
    Ok(())
}

/// `zt fetch URL --slice 'GLOB=SPEC' ... -o OUT`: of each object a glob
/// matches (the first that does, narrowed by `--select`), the slice SPEC
/// (`START:END` per dimension: [`zt_format::slice`]), fetched alone where
/// the server gathers it and verified, written as an object of a `.zt`
/// file: the slice's shape, a sha256 digest, and attributes naming the
/// source (`slice_of`: the object, `slice`: the slice written out whole,
/// `slice_from_shape`: the object's shape). The slices are held in memory
/// until the file is written, atomically.
pub async fn slices(
    url: &str,
    out: &Path,
    select: &[String],
    specs: &[String],
    args: &RemoteArgs,
    accept: AcceptArgs,
) -> Result<()> {
    use crate::exit::{Failure, USAGE};
    use zt_format::select::Selection;
    use zt_format::slice::Slice;
    let mut asked = Vec::new();
    for s in specs {
        let usage = |why: String| Failure::new(USAGE, format!("--slice {s:?}: {why}"));
        let (glob, spec) = s
            .rsplit_once('=')
            .ok_or_else(|| usage("give GLOB=SPEC, e.g. '*.weight=:,0:1024'".to_owned()))?;
        let sel = Selection::new(&[glob]).map_err(|e| usage(e.to_string()))?;
        let slice = Slice::parse(spec).map_err(|e| usage(e.to_string()))?;
        asked.push((sel, slice));
    }
    let narrowed = Selection::new(select).map_err(|e| Failure::new(USAGE, e.to_string()))?;
    let client = Client::connect(url, args.options(accept)?).await?;
    let remote = client.manifest().await?;
    let read = async {
        let mut got = Vec::new();
        for (name, obj) in &remote.manifest.objects {
            let Some((_, slice)) = asked.iter().find(|(sel, _)| sel.matches(name)) else {
                continue;
            };
            if !(narrowed.is_all() || narrowed.matches(name)) {
                continue;
            }
            let (d, shape) = client.read_slice(&remote, name, slice).await?;
            let spec = slice
                .gather(obj, u64::MAX)
                .map(|g| g.spec())
                .unwrap_or_else(|_| slice.to_string());
            got.push((name.to_string(), obj.shape.clone(), shape, spec, d));
        }
        Ok::<_, zt_client::Error>(got)
    };
    let got = read.await;
    // Closed whether the slices came or not: a QUIC server is told.
    client.close().await;
    let got = got?;
    if got.is_empty() {
        return Err(
            Failure::new(USAGE, format!("{url}: no object matches the --slice globs")).into(),
        );
    }
    let label = out.display().to_string();
    let bytes: u64 = got.iter().map(|g| g.4.data.len() as u64).sum();
    zt_format::write_atomic(out, |w| {
        let mut file = zt_format::Writer::new(&mut *w, &label)?;
        for (name, from_shape, shape, spec, d) in &got {
            use zt_format::CborValue as V;
            let attributes: zt_format::Attributes = [
                ("slice_of".to_owned(), V::Text(name.to_string())),
                ("slice".to_owned(), V::Text(spec.clone())),
                (
                    "slice_from_shape".to_owned(),
                    V::Array(from_shape.iter().map(|&n| V::Integer(n.into())).collect()),
                ),
            ]
            .into_iter()
            .collect();
            let logical = d.logical_type.as_ref().map(|t| t.name().to_owned());
            let c = zt_format::ComponentData {
                role: "data",
                dtype: d.dtype,
                logical_type: logical.as_deref(),
                data: d.data.as_slice(),
            };
            let store = zt_format::StoreOptions {
                zstd_level: None,
                digest: Some(zt_format::DigestAlgorithm::Sha256),
            };
            file.add_object(
                name,
                shape,
                &zt_format::Format::Dense,
                attributes,
                &[c],
                store,
            )?;
        }
        file.finish()?;
        Ok(())
    })?;
    eprintln!("{}: {} slices ({bytes} bytes)", out.display(), got.len());
    Ok(())
}
