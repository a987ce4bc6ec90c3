//! The command-line flags that set configuration keys, made from the keys
//! themselves ([`super::keys::Flag`]): each flag's name, placeholder and
//! help come from its key, so `ztserve --help` and the file never drift.

use std::ffi::OsString;

use anyhow::Result;
use clap::builder::PossibleValuesParser;
use clap::{Arg, ArgAction, ArgMatches};

use super::keys::Flag;
use super::{parse_value, FlagValues};

/// Keys set together or not at all: each flag requires the other.
const TOGETHER: [(&str, &str); 1] = [("tls.cert", "tls.key")];

/// One `clap` argument per key that has a flag, its id the dotted key: a
/// key with few values offers them, any other takes any string (a path
/// as the OS gives it).
pub fn flag_args() -> Vec<Arg> {
    super::keys()
        .iter()
        .filter_map(|k| {
            let mut arg = Arg::new(k.name);
            for (a, b) in TOGETHER {
                if k.name == a {
                    arg = arg.requires(b);
                } else if k.name == b {
                    arg = arg.requires(a);
                }
            }
            Some(match k.flag? {
                Flag::Value(long, value) => {
                    let arg = arg
                        .long(long)
                        .value_name(value)
                        .action(ArgAction::Set)
                        .help(format!("{} [env: {}]", k.summary(), k.env()));
                    if k.values.is_empty() {
                        arg.value_parser(clap::value_parser!(OsString))
                    } else {
                        arg.value_parser(PossibleValuesParser::new(k.values))
                    }
                }
                Flag::Off(long) => {
                    let summary = k.summary();
                    let mut first = summary.chars();
                    let lower = first
                        .next()
                        .map(|c| c.to_lowercase().chain(first).collect::<String>())
                        .unwrap_or_default();
                    arg.long(long)
                        .action(ArgAction::SetTrue)
                        .help(format!("Do not {lower} [env: {}=false]", k.env()))
                }
            })
        })
        .collect()
}

/// The keys the flags in `m` set, with their values, as [`super::Sources`]
/// takes them; a value that does not fit its key is an error naming the
/// flag.
pub fn flag_values(m: &ArgMatches) -> Result<FlagValues> {
    let mut out = Vec::new();
    for k in super::keys() {
        match k.flag {
            Some(Flag::Value(long, _)) => {
                let raw = match k.values.is_empty() {
                    true => m
                        .get_one::<OsString>(k.name)
                        .map(|v| v.to_string_lossy().into_owned()),
                    false => m.get_one::<String>(k.name).cloned(),
                };
                if let Some(raw) = raw {
                    out.push((k.name, parse_value(k, &format!("--{long}"), &raw)?));
                }
            }
            Some(Flag::Off(_)) if m.get_flag(k.name) => {
                out.push((k.name, toml::Value::Boolean(false)));
            }
            Some(Flag::Off(_)) | None => {}
        }
    }
    Ok(out)
}
