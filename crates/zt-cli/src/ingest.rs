//! `zt ingest`: the MATRIX-ATOM pipeline of seed 002 (zt-ingest):
//! `tokenizer` (a symbol map from a GGUF vocabulary), `clean` (an input's
//! cleaned text), `pack` (inputs into an ingest pack) and `verify` (a
//! pack, an atom file or an SVG-Tensor file).

use std::io::{IsTerminal as _, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Subcommand;
use zt_format::atoms::AtomDtype;
use zt_ingest::clean::{clean, Kind};
use zt_ingest::pack::{pack, PackRequest};

use crate::exit::{Failure, INVALID, IO, USAGE};

#[derive(Subcommand, Debug)]
pub enum IngestCommand {
    /// Build pi_symbol_map.json from a GGUF model's tokenizer.ggml.tokens (GGUF order, id = index).
    Tokenizer {
        /// The GGUF model whose vocabulary to take.
        #[arg(long = "from-gguf", value_name = "MODEL.gguf")]
        from_gguf: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Print an input's cleaned text (.txt, .json, .html, .md), as pack tokenizes it.
    Clean { input: PathBuf },
    /// Clean, tokenize and pack inputs into an ingest pack directory.
    Pack {
        /// .txt, .json, .html and .md files, one document each, in this order.
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// The symbol map (pi_symbol_map.json).
        #[arg(long)]
        tokenizer: PathBuf,
        /// Tokens per atom.
        #[arg(long)]
        atom_size: u32,
        /// Token id width (default: u16 when the vocabulary fits in 65,536 ids, else u32).
        #[arg(long, value_parser = ["u16", "u32"])]
        dtype: Option<String>,
        /// Also write atoms.svgt, each atom a ROWSxCOLS grid (ROWS*COLS = atom size; u16 only).
        #[arg(long, value_name = "ROWSxCOLS")]
        svg: Option<String>,
        /// The pack directory to create (it must not exist).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Draw one atom of an SVG-Tensor file as an SVG grid (a cell per token, coloured by id).
    Svg {
        file: PathBuf,
        /// Which atom (0-based).
        #[arg(long)]
        atom: u64,
        /// A symbol map: token texts as tooltips.
        #[arg(long)]
        tokenizer: Option<PathBuf>,
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Check a pack directory, a MATRIX-ATOM file or (with --atoms) an SVG-Tensor file.
    Verify {
        path: PathBuf,
        /// The atom file an SVG-Tensor file projects.
        #[arg(long)]
        atoms: Option<PathBuf>,
    },
}

fn failure(e: zt_ingest::Error) -> anyhow::Error {
    let code = match &e {
        zt_ingest::Error::Io { .. } => IO,
        _ => INVALID,
    };
    Failure::new(code, e.to_string()).into()
}

fn svg_grid(text: &str) -> Result<(u16, u16)> {
    let bad = || Failure::new(USAGE, format!("--svg {text:?}: give ROWSxCOLS, e.g. 16x16"));
    let (r, c) = text.split_once(['x', 'X']).ok_or_else(bad)?;
    Ok((r.parse().map_err(|_| bad())?, c.parse().map_err(|_| bad())?))
}

pub fn run(out: &mut impl Write, cmd: IngestCommand) -> Result<()> {
    match cmd {
        IngestCommand::Tokenizer { from_gguf, output } => {
            let map = zt_ingest::gguf_map::from_gguf(&from_gguf).map_err(failure)?;
            write_file(&output, &map.to_json(), "writing the symbol map")?;
            writeln!(
                out,
                "{}: {} symbols, byte fallback {}, whitespace {:?}",
                output.display(),
                map.symbols.len(),
                map.byte_fallback,
                map.whitespace
            )?;
            Ok(())
        }
        IngestCommand::Clean { input } => {
            let label = input.display().to_string();
            let kind = Kind::of(&input).ok_or_else(|| {
                Failure::new(
                    USAGE,
                    format!("{label}: unknown kind of input (.txt, .json, .html, .md)"),
                )
            })?;
            let bytes = std::fs::read(&input).with_context(|| format!("reading {label}"))?;
            let text = clean(&label, kind, &bytes).map_err(failure)?;
            writeln!(out, "{text}")?;
            Ok(())
        }
        IngestCommand::Pack {
            inputs,
            tokenizer,
            atom_size,
            dtype,
            svg,
            output,
        } => {
            let dtype = dtype.map(|d| {
                if d == "u32" {
                    AtomDtype::U32
                } else {
                    AtomDtype::U16
                }
            });
            let req = PackRequest {
                inputs,
                tokenizer,
                atom_size,
                dtype,
                svg: svg.as_deref().map(svg_grid).transpose()?,
                out: output,
            };
            let bar = progress_bar(req.inputs.len());
            let m = pack(&req, &mut |done, _| bar.set_position(done as u64)).map_err(failure)?;
            bar.finish_and_clear();
            writeln!(
                out,
                "{}: {} documents, {} tokens in {} atoms of {} ({}), {}",
                req.out.display(),
                m.documents,
                m.tokens,
                m.atoms,
                m.atom_size,
                m.dtype,
                m.hash
            )?;
            Ok(())
        }
        IngestCommand::Verify { path, atoms } => verify(out, &path, atoms.as_deref()),
        IngestCommand::Svg {
            file,
            atom,
            tokenizer,
            output,
        } => {
            let label = file.display().to_string();
            let svgt = std::fs::read(&file).with_context(|| format!("reading {label}"))?;
            let map = match &tokenizer {
                Some(p) => {
                    let json =
                        std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
                    Some(
                        zt_format::atoms::symbols::SymbolMap::from_json(
                            &p.display().to_string(),
                            &json,
                        )
                        .map_err(|e| failure(e.into()))?,
                    )
                }
                None => None,
            };
            let svg = zt_ingest::svg::render(&label, &svgt, atom, map.as_ref()).map_err(failure)?;
            write_file(&output, svg.as_bytes(), "writing the SVG")?;
            writeln!(out, "{}: atom {atom}", output.display())?;
            Ok(())
        }
    }
}

fn verify(out: &mut impl Write, path: &Path, atoms: Option<&Path>) -> Result<()> {
    let label = path.display().to_string();
    if path.is_dir() {
        let m = zt_ingest::verify::pack_dir(path).map_err(failure)?;
        writeln!(
            out,
            "{label}: ok ({} documents, {} tokens, {} atoms)",
            m.documents, m.tokens, m.atoms
        )?;
        return Ok(());
    }
    let bytes = std::fs::read(path).with_context(|| format!("reading {label}"))?;
    if bytes.starts_with(zt_format::atoms::svg_tensor::MAGIC) {
        let atoms = atoms.ok_or_else(|| {
            Failure::new(USAGE, format!("{label}: an SVG-Tensor file is checked against its atom file: give --atoms FILE"))
        })?;
        let atom_bytes =
            std::fs::read(atoms).with_context(|| format!("reading {}", atoms.display()))?;
        let v = zt_ingest::verify::atom_file(&atoms.display().to_string(), &atom_bytes)
            .map_err(failure)?;
        zt_ingest::verify::svg_file(&label, &bytes, &atom_bytes, &v.header).map_err(failure)?;
    } else {
        zt_ingest::verify::atom_file(&label, &bytes).map_err(failure)?;
    }
    writeln!(out, "{label}: ok")?;
    Ok(())
}

fn progress_bar(len: usize) -> indicatif::ProgressBar {
    if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(len as u64)
    } else {
        indicatif::ProgressBar::hidden()
    }
}

/// Writes `bytes` to `path` through a temporary renamed into place.
pub(crate) fn write_file(path: &Path, bytes: &[u8], context: &'static str) -> Result<()> {
    let label = path.display().to_string();
    zt_format::write_atomic(path, |w| {
        w.write_all(bytes).map_err(|source| zt_format::Error::Io {
            at: zt_format::Location {
                file: label.clone(),
                object: None,
                component: None,
            },
            context,
            source,
        })
    })?;
    Ok(())
}
