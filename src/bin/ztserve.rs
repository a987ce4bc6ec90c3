//! `ztserve`: serve every `.zt` file under a directory over HTTP.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;
use ztserve::server::config::{self, LogFormat, Sources};
use ztserve::server::{self, State};

#[derive(Parser)]
#[command(
    name = "ztserve",
    version,
    about = "Serve a directory tree of zTensor (.zt) files over HTTP and QUIC (ztp/1)",
    after_help = "Configuration precedence: flags > ZTSERVE_* environment variables > --config file > defaults.\n\
Exit codes: 0 clean shutdown; 1 runtime failure; 2 invalid configuration or usage."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Directory tree to serve [env: ZTSERVE_ROOT]
    #[arg(long)]
    root: Option<PathBuf>,
    /// HTTP listen address, e.g. 0.0.0.0:7070 or [::]:7070 [env: ZTSERVE_LISTEN]
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// TOML configuration file (see --print-default-config) [env: ZTSERVE_CONFIG]
    #[arg(long, value_name = "FILE", env = config::CONFIG_ENV, hide_env = true)]
    config: Option<PathBuf>,
    /// Log format: text or json [env: ZTSERVE_LOG_FORMAT]
    #[arg(long, value_parser = ["text", "json"])]
    log_format: Option<String>,
    /// Log filter, e.g. info or ztserve=debug [env: ZTSERVE_LOG_LEVEL; RUST_LOG wins]
    #[arg(long)]
    log_level: Option<String>,
    /// Seconds to finish requests in flight after SIGTERM/SIGINT [env: ZTSERVE_SHUTDOWN_TIMEOUT_SECS]
    #[arg(long)]
    shutdown_timeout_secs: Option<u64>,
    /// Bearer tokens, one per line, re-read on change [env: ZTSERVE_AUTH_TOKEN_FILE]
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// PEM certificate chain: serve HTTPS [env: ZTSERVE_TLS_CERT]
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert [env: ZTSERVE_TLS_KEY]
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// UDP address for ztp/1 over QUIC [default: the HTTP address; env: ZTSERVE_QUIC_LISTEN]
    #[arg(long, value_name = "ADDR")]
    quic_listen: Option<SocketAddr>,
    /// Do not serve QUIC
    #[arg(long)]
    no_quic: bool,
    /// Do not serve the web page at /ui/ [env: ZTSERVE_UI_ENABLED=false]
    #[arg(long)]
    no_ui: bool,
    /// Writable directory for the generated QUIC certificate [env: ZTSERVE_STATE_DIR]
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Validate a configuration file (with the environment and flags) and exit
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    check_config: Option<PathBuf>,
    /// Print the commented default configuration and exit
    #[arg(long)]
    print_default_config: bool,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Exit 0 when the daemon answers 200 on /healthz, 1 otherwise (for
    /// container health checks; a slim image has no curl)
    Healthcheck {
        /// URL to ask [default: /healthz on the configured listen port, over
        /// loopback, HTTPS when TLS is configured]
        url: Option<String>,
        /// Seconds to wait for the answer
        #[arg(long, default_value_t = 5)]
        timeout_secs: u64,
    },
}

impl Cli {
    fn flags(&self) -> Vec<(&'static str, toml::Value)> {
        let mut f = Vec::new();
        let s = |v: &str| toml::Value::String(v.to_owned());
        if let Some(r) = &self.root {
            f.push(("root", s(&r.to_string_lossy())));
        }
        if let Some(l) = &self.listen {
            f.push(("listen", s(&l.to_string())));
        }
        if let Some(v) = &self.log_format {
            f.push(("log_format", s(v)));
        }
        if let Some(v) = &self.log_level {
            f.push(("log_level", s(v)));
        }
        for (key, v) in [
            ("auth.token_file", &self.token_file),
            ("tls.cert", &self.tls_cert),
            ("tls.key", &self.tls_key),
        ] {
            if let Some(p) = v {
                f.push((key, s(&p.to_string_lossy())));
            }
        }
        if let Some(a) = &self.quic_listen {
            f.push(("quic.listen", s(&a.to_string())));
        }
        if self.no_quic {
            f.push(("quic.enabled", toml::Value::Boolean(false)));
        }
        if self.no_ui {
            f.push(("ui.enabled", toml::Value::Boolean(false)));
        }
        if let Some(d) = &self.state_dir {
            f.push(("state_dir", s(&d.to_string_lossy())));
        }
        if let Some(v) = self.shutdown_timeout_secs {
            f.push((
                "shutdown_timeout_secs",
                toml::Value::Integer(i64::try_from(v).unwrap_or(i64::MAX)),
            ));
        }
        f
    }
}

fn init_logging(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => tracing::info!(signal = "SIGINT", "signal received"),
        _ = term => tracing::info!(signal = "SIGTERM", "signal received"),
    }
}

/// Raises the open-file limit to its hard maximum: every served file holds a descriptor.
fn raise_nofile_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => tracing::debug!(limit = n, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
}

/// An error and the exit code it gets.
struct Failure(u8, anyhow::Error);

fn sources(cli: &Cli) -> Sources<'_> {
    Sources {
        file: cli.config.as_deref().or(cli.check_config.as_deref()),
        env: std::env::vars().collect(),
        flags: cli.flags(),
    }
}

/// `ztserve healthcheck`: the URL from the same configuration the daemon
/// reads (file, environment, flags); `root` need not exist for this.
fn healthcheck(cli: &Cli, url: Option<&str>, timeout: u64) -> Result<(), Failure> {
    let url = match url {
        Some(u) => u.to_owned(),
        None => {
            let mut s = sources(cli);
            if cli.root.is_none() {
                s.flags.push(("root", toml::Value::String("/".into())));
            }
            let config = config::load(&s).map_err(|e| Failure(2, e))?;
            server::healthcheck::default_url(&config)
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
        .map_err(|e| Failure(1, e))?;
    rt.block_on(server::healthcheck::probe(
        &url,
        std::time::Duration::from_secs(timeout.max(1)),
    ))
    .map_err(|e| Failure(1, e))?;
    println!("{url}: ok");
    Ok(())
}

fn serve(cli: Cli) -> Result<(), Failure> {
    let config = config::load(&sources(&cli)).map_err(|e| Failure(2, e))?;
    if let Some(f) = &cli.check_config {
        println!("{}: ok", f.display());
        return Ok(());
    }
    init_logging(config.log_format, &config.log_level);
    raise_nofile_limit();
    let rt = tokio::runtime::Runtime::new()
        .context("starting the runtime")
        .map_err(|e| Failure(1, e))?;
    rt.block_on(async move {
        let listener = server::bind(config.listen)?;
        let state = State::new(config)?;
        server::run(state, listener, shutdown_signal()).await
    })
    .map_err(|e| Failure(1, e))
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    if cli.print_default_config {
        print!("{}", config::DEFAULT_CONFIG);
        return ExitCode::SUCCESS;
    }
    let result = match &cli.command {
        Some(Command::Healthcheck { url, timeout_secs }) => {
            healthcheck(&cli, url.as_deref(), *timeout_secs)
        }
        None => serve(cli),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, e)) => {
            eprintln!("ztserve: {e:#}");
            ExitCode::from(code)
        }
    }
}
