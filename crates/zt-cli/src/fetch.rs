//! `zt fetch` and remote `zt info`: the client library on the command line.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};

use zt_client::copy::copy_sharded;
use zt_client::output::fetch_to_file;
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
    /// Trust server certificates signed by the CAs in this PEM file
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Bearer token
    #[arg(long, env = "ZT_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Transport, overriding the URL's scheme
    #[arg(long, value_parser = ["quic", "http"])]
    pub via: Option<String>,
    /// Parallel HTTP requests
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
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
            connections: self.connections.max(1),
            allow_unverified: accept.allow_unverified,
            require_digest: accept.require_digest,
            via: self
                .via
                .as_deref()
                .map(|v| if v == "quic" { Via::Quic } else { Via::Http }),
            ..Options::default()
        })
    }
}

/// The default output name: the last segment of the URL's path.
pub fn default_output(url: &str) -> PathBuf {
    let name = url
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or("fetched.zt");
    PathBuf::from(name)
}

/// Runs `zt fetch`.
pub async fn run(
    url: &str,
    out: &Path,
    select: &[String],
    args: &RemoteArgs,
    accept: AcceptArgs,
    direct_io: bool,
) -> Result<()> {
    let options = Options {
        direct_io,
        ..args.options(accept)?
    };
    let client = Client::connect(url, options).await?;
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
    // A directory receives a sharded checkpoint: its shards and index.
    let into_dir = out.as_os_str().to_string_lossy().ends_with('/') || out.is_dir();
    let written = if into_dir {
        if !select.is_empty() {
            bail!("{}: a directory receives a whole sharded checkpoint; write a selection as a .zt file (-o NAME.zt)", out.display());
        }
        copy_sharded(&client, out, &mut progress).await
    } else {
        fetch_to_file(&client, select, out, &mut progress).await
    };
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
