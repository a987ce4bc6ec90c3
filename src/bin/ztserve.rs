//! `ztserve`: serve every `.zt` file under a directory over HTTP.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser};
use tracing_subscriber::EnvFilter;
use ztserve::server::config::{self, FlagValues, LogFormat, Sources};
use ztserve::server::{self, State};

/// The daemon's allocator: jemalloc, whose background threads give the
/// memory freed after a burst (a flood of slow readers, a manifest
/// rendered) back to the system; glibc's malloc kept it (issue 28).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    /// TOML configuration file (see --print-default-config) [env: ZTSERVE_CONFIG]
    #[arg(long, value_name = "FILE", env = config::CONFIG_ENV, hide_env = true)]
    config: Option<PathBuf>,
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

/// The command line: [`Cli`]'s own options, and a flag for each
/// configuration key that has one (`config::flag_args`), read back as
/// `(key, value)` pairs.
fn parse_command_line() -> Result<(Cli, FlagValues), ExitCode> {
    let command = config::flag_args()
        .into_iter()
        .fold(Cli::command(), clap::Command::arg);
    let parsed = command
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m).map(|cli| (cli, m)));
    let (cli, matches) = match parsed {
        Ok(got) => got,
        Err(e) => {
            let _ = e.print();
            return Err(ExitCode::from(if e.use_stderr() { 2 } else { 0 }));
        }
    };
    match config::flag_values(&matches) {
        Ok(flags) => Ok((cli, flags)),
        Err(e) => {
            eprintln!("ztserve: {e:#}");
            Err(ExitCode::from(2))
        }
    }
}

fn sources<'a>(cli: &'a Cli, flags: &FlagValues) -> Sources<'a> {
    Sources {
        file: cli.config.as_deref().or(cli.check_config.as_deref()),
        env: std::env::vars().collect(),
        flags: flags.to_vec(),
    }
}

/// `ztserve healthcheck`: the URL from the same configuration the daemon
/// reads (file, environment, flags); `root` need not exist for this.
fn healthcheck(
    cli: &Cli,
    flags: &FlagValues,
    url: Option<&str>,
    timeout: u64,
) -> Result<(), Failure> {
    let url = match url {
        Some(u) => u.to_owned(),
        None => {
            let mut s = sources(cli, flags);
            if !flags.iter().any(|(k, _)| *k == "root") {
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

fn serve(cli: &Cli, flags: &FlagValues) -> Result<(), Failure> {
    let config = config::load(&sources(cli, flags))
        .and_then(|c| server::check(&c).map(|()| c))
        .map_err(|e| Failure(2, e))?;
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
    let (cli, flags) = match parse_command_line() {
        Ok(got) => got,
        Err(code) => return code,
    };
    if cli.print_default_config {
        print!("{}", config::DEFAULT_CONFIG);
        return ExitCode::SUCCESS;
    }
    let result = match &cli.command {
        Some(Command::Healthcheck { url, timeout_secs }) => {
            healthcheck(&cli, &flags, url.as_deref(), *timeout_secs)
        }
        None => serve(&cli, &flags),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, e)) => {
            eprintln!("ztserve: {e:#}");
            ExitCode::from(code)
        }
    }
}
