//! `zt`: inspect, verify, pack and export zTensor files.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};
use zt_cli::{self as tool, exit};
use zt_format::{DigestAlgorithm, Limits, ReadOptions, StoreOptions, Verify, ZtFile};

/// The tool's allocator: jemalloc, as the daemon's, with the same build
/// settings (`.cargo/config.toml`). Under glibc's malloc a `zt fetch
/// quic://` of a 1 GiB file faulted in 53,000-95,000 fresh pages (quinn
/// copies each message it receives into a buffer of its own, and glibc
/// gave the freed buffers back to the system and faulted in new ones),
/// against 9,600-12,700 with jemalloc, which returns freed pages
/// gradually over about a second; the fetch took 0.87-0.97x the time,
/// `zt fetch http://` 0.93-0.95x (loopback, 2 cores; docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(name = "zt", version, about = "Inspect, verify, pack and export zTensor (.zt) files", after_help = exit::HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone, Copy)]
struct ReadArgs {
    /// Largest manifest accepted, in bytes.
    #[arg(long, default_value_t = zt_format_defaults::MANIFEST_CAP)]
    manifest_cap: u64,
    /// Largest decoded size of one zstd component, in bytes.
    #[arg(long, default_value_t = zt_format_defaults::DECOMPRESS_CAP)]
    decompress_cap: u64,
    /// Read without checking digests.
    #[arg(long)]
    no_verify: bool,
    /// Let components whose digest algorithm is unknown through.
    #[arg(long)]
    allow_unverified: bool,
}

mod zt_format_defaults {
    pub(crate) const MANIFEST_CAP: u64 = zt_format::DEFAULT_MANIFEST_CAP;
    pub(crate) const DECOMPRESS_CAP: u64 = zt_format::DEFAULT_DECOMPRESS_CAP;
}

impl ReadArgs {
    fn options(self) -> ReadOptions {
        ReadOptions {
            limits: Limits {
                manifest_cap: self.manifest_cap,
                decompress_cap: self.decompress_cap,
                ..Limits::default()
            },
            verify: if self.no_verify {
                Verify::Skip
            } else if self.allow_unverified {
                Verify::AllowUnknownAlgorithms
            } else {
                Verify::Digests
            },
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum DigestArg {
    Sha256,
    Crc32c,
    None,
}

#[derive(Subcommand)]
enum Command {
    /// Show the version, attributes and a table of objects (FILE may be a quic:// or http(s):// URL).
    #[command(after_help = exit::HELP)]
    Info {
        file: PathBuf,
        #[command(flatten)]
        remote: tool::fetch::RemoteArgs,
        /// Print the manifest in the shared JSON schema.
        #[arg(long)]
        json: bool,
        /// Only objects matching this glob (repeatable; `*` and `?` cross `.` and `/`).
        #[arg(long = "select", value_name = "GLOB")]
        select: Vec<String>,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Check the structure and every digest, naming each failing component.
    #[command(after_help = exit::HELP)]
    Verify {
        file: PathBuf,
        /// Treat a component without a digest as unverifiable (exit 3).
        #[arg(long)]
        require_digest: bool,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Pack .safetensors, .npy, .npz and .zt (any version) into one v1.2 file, in layer order.
    #[command(after_help = exit::HELP)]
    Pack {
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        #[arg(short, long)]
        output: PathBuf,
        /// Compression: none, zstd, or zstd:LEVEL (1-22).
        #[arg(long, default_value = "none", value_parser = tool::pack::parse_compress)]
        compress: tool::pack::Compress,
        /// Digest over each component's stored bytes.
        #[arg(long, value_enum, default_value = "crc32c")]
        digest: DigestArg,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Fetch a remote file (or a selection) over QUIC or HTTP, verified, into a local v1.2 file.
    #[command(after_help = exit::HELP)]
    Fetch {
        /// quic://host:port/path.zt or http(s)://host:port/.../path.zt
        url: String,
        /// Output file [default: the URL's last path segment]
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Only objects matching this glob (repeatable; `*` and `?` cross `.` and `/`)
        #[arg(long = "select", value_name = "GLOB")]
        select: Vec<String>,
        #[command(flatten)]
        remote: tool::fetch::RemoteArgs,
        #[command(flatten)]
        accept: tool::fetch::AcceptArgs,
        /// Write everything through the page cache (by default components of
        /// 1 MiB or more go to disk with direct I/O where the filesystem allows it)
        #[arg(long)]
        no_direct_io: bool,
        /// Of a MATRIX-ATOM file, only atoms I..J (half-open), written as a
        /// MATRIX-ATOM file of their own (new header and CRCs, the document
        /// index rebased)
        #[arg(long, value_name = "I..J", conflicts_with = "select")]
        atoms: Option<String>,
        /// Another server of the same file (repeatable): when a server fails
        /// mid-fetch, the fetch resumes from the next, keeping what it verified
        #[arg(long = "mirror", value_name = "URL", conflicts_with = "atoms")]
        mirrors: Vec<String>,
        /// Of each object GLOB matches, only the slice SPEC (`START:END` per
        /// dimension, e.g. ':,0:1024'), written as an object of the output
        /// `.zt` (repeatable; the first matching glob wins; only matched
        /// objects are written). A ztserve daemon gathers the slice over HTTP
        #[arg(long = "slice", value_name = "GLOB=SPEC", conflicts_with_all = ["atoms", "mirrors"])]
        slices: Vec<String>,
    },
    /// Export dense objects to a .safetensors file.
    #[command(after_help = exit::HELP)]
    Export {
        file: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// MATRIX-ATOM ingest (seed 002): tokenizer, clean, pack, verify.
    #[command(subcommand, after_help = exit::HELP)]
    Ingest(tool::ingest::IngestCommand),
    /// Write one component's bytes (decoded unless --stored) to standard output.
    #[command(after_help = exit::HELP)]
    Cat {
        file: PathBuf,
        object: String,
        #[arg(default_value = "data")]
        component: String,
        /// The stored bytes (compressed for zstd), not the decoded ones.
        #[arg(long)]
        stored: bool,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// The cache of fetched components: list, verify or prune it.
    #[command(after_help = exit::HELP)]
    Cache {
        #[command(subcommand)]
        action: tool::cache::Action,
        /// The cache [default: $ZTSERVE_CACHE, else ~/.cache/ztserve]
        #[arg(long, value_name = "DIR", global = true)]
        cache_dir: Option<PathBuf>,
    },
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn run(cli: Cli) -> Result<()> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Command::Info {
            file,
            remote,
            json,
            select,
            read,
        } => {
            let name = file.to_string_lossy();
            if name.contains("://") {
                let (manifest, warnings) = runtime()?.block_on(async {
                    let accept = tool::fetch::AcceptArgs {
                        require_digest: false,
                        allow_unverified: read.allow_unverified,
                    };
                    let client = zt_client::Client::connect(&name, remote.options(accept)?).await?;
                    let remote = client.manifest().await;
                    client.close().await;
                    anyhow::Ok((remote?.manifest, Vec::new()))
                })?;
                let manifest = tool::info::selected(&manifest, &select)?;
                return tool::info::print(&mut out, &manifest, &warnings, json);
            }
            let f = ZtFile::open_with(&file, read.options())?;
            let manifest = tool::info::selected(f.manifest(), &select)?;
            tool::info::print(&mut out, &manifest, f.warnings(), json)
        }
        Command::Verify {
            file,
            require_digest,
            read,
        } => {
            let f = ZtFile::open_with(&file, read.options())?;
            let policy = tool::verify::Policy {
                require_digest,
                allow_unverified: read.allow_unverified,
            };
            tool::verify::run(&mut out, &f, policy)
        }
        Command::Pack {
            inputs,
            output,
            compress,
            digest,
            read,
        } => {
            let digest = match digest {
                DigestArg::Sha256 => Some(DigestAlgorithm::Sha256),
                DigestArg::Crc32c => Some(DigestAlgorithm::Crc32c),
                DigestArg::None => None,
            };
            let opts = tool::pack::PackOptions {
                store: StoreOptions {
                    zstd_level: compress.0,
                    digest,
                },
                read: read.options(),
                progress: io::stderr().is_terminal(),
            };
            tool::pack::run(&inputs, &output, opts)?;
            Ok(())
        }
        Command::Fetch {
            url,
            output,
            select,
            remote,
            accept,
            no_direct_io,
            atoms,
            mirrors,
            slices,
        } => {
            let out_path = output.unwrap_or_else(|| tool::fetch::default_output(&url));
            if !slices.is_empty() {
                return runtime()?.block_on(tool::fetch::slices(
                    &url, &out_path, &select, &slices, &remote, accept,
                ));
            }
            if let Some(range) = atoms {
                return runtime()?
                    .block_on(tool::fetch::atoms(&url, &out_path, &range, &remote, accept));
            }
            let urls: Vec<String> = std::iter::once(url).chain(mirrors).collect();
            runtime()?.block_on(tool::fetch::run(
                &urls,
                &out_path,
                &select,
                &remote,
                accept,
                !no_direct_io,
            ))
        }
        Command::Export { file, output, read } => {
            let f = ZtFile::open_with(&file, read.options())?;
            tool::export::run(&f, &output)?;
            Ok(())
        }
        Command::Ingest(cmd) => tool::ingest::run(&mut out, cmd),
        Command::Cat {
            file,
            object,
            component,
            stored,
            read,
        } => {
            let f = ZtFile::open_with(&file, read.options())?;
            tool::cat::run(&mut out, &f, &object, &component, stored)
        }
        Command::Cache { action, cache_dir } => {
            let cache = tool::cache::open(cache_dir)?;
            if tool::cache::run(&mut out, &cache, &action)? {
                Ok(())
            } else {
                Err(tool::Failure::new(
                    exit::INVALID,
                    "cache entries failed their digests and were removed",
                )
                .into())
            }
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::USAGE } else { 0 });
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if exit::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(io::stderr(), "zt: {}", exit::report(&e));
            ExitCode::from(exit::exit_code(&e))
        }
    }
}
