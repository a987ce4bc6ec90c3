//! A configuration key, defined once: the `settings!` macro declares a
//! section's struct, and from the same lines its defaults, its keys' kinds
//! and doc lines, and the command-line flags that set them. Loading
//! (`super::load`), the `ZTSERVE_*` variables, the flags, and the tests
//! that check `config/ztserve.toml` and the docs' tables all read the
//! table `super::keys` gathers, so a key is never named twice.

use std::net::SocketAddr;
use std::path::PathBuf;

/// How a value is read from an environment variable or a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    Int,
    Bool,
    /// Comma-separated in a variable, repeated on the command line.
    List,
}

/// A flag that sets a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    /// `--NAME VALUE`, shown with the value's placeholder.
    Value(&'static str, &'static str),
    /// `--NAME` sets a boolean key to false (`--no-quic`).
    Off(&'static str),
}

/// One configuration key.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// Dotted, as in the file: `limits.max_ranges`.
    pub name: &'static str,
    pub kind: Kind,
    /// The doc comment of its field.
    pub doc: &'static str,
    pub flag: Option<Flag>,
    /// The values a text key may take, when they are few (an enum's).
    pub values: &'static [&'static str],
}

impl Key {
    /// Its environment variable: `ZTSERVE_` + the key in upper case with
    /// `.` as `_`.
    pub fn env(&self) -> String {
        env_name(self.name)
    }

    /// The first sentence of its doc, for a flag's help.
    pub fn summary(&self) -> String {
        let text = self.doc.split_whitespace().collect::<Vec<_>>().join(" ");
        match text.find(". ") {
            Some(end) => text[..end].to_owned(),
            None => text.trim_end_matches('.').to_owned(),
        }
    }
}

/// The kind of a field's type, and the values it may take when they are
/// few.
pub trait Setting {
    const KIND: Kind;
    const VALUES: &'static [&'static str] = &[];
}

macro_rules! kinds {
    ($kind:ident: $($t:ty),*) => { $(impl Setting for $t { const KIND: Kind = Kind::$kind; })* };
}
kinds!(Int: u64, usize, u16);
kinds!(Bool: bool);
kinds!(Text: String, PathBuf, SocketAddr);
kinds!(List: Vec<String>);

impl<T: Setting> Setting for Option<T> {
    const KIND: Kind = T::KIND;
    const VALUES: &'static [&'static str] = T::VALUES;
}

/// Declares a section of the configuration: its struct (serde reads it,
/// every field optional, unknown keys refused), its `Default` from each
/// field's `= default`, and `keys` (each field's dotted key, kind, doc,
/// flag and values). A field's `#[flag(…)]` or `#[flag_off(…)]` comes
/// before its doc lines. `sections { … }` nests other sections under
/// their names.
macro_rules! settings {
    (
        $(#[doc = $sdoc:literal])*
        pub struct $name:ident in $prefix:literal {
            $(
                $(#[flag($long:literal, $value:literal)])?
                $(#[flag_off($off:literal)])?
                $(#[doc = $doc:literal])*
                pub $field:ident : $ty:ty = $default:expr,
            )*
        }
        $(sections { $($sec:ident : $sty:ty),* $(,)? })?
    ) => {
        $(#[doc = $sdoc])*
        #[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct $name {
            $( $(#[doc = $doc])* pub $field: $ty, )*
            $($( pub $sec: $sty, )*)?
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    $( $field: $default, )*
                    $($( $sec: <$sty>::default(), )*)?
                }
            }
        }

        impl $name {
            /// This section's keys, then its nested sections'.
            pub(crate) fn keys(out: &mut Vec<$crate::server::config::keys::Key>) {
                use $crate::server::config::keys::{Flag, Key, Setting};
                $(
                    #[allow(unused_mut, unused_assignments)]
                    let mut flag: Option<Flag> = None;
                    $(flag = Some(Flag::Value($long, $value));)?
                    $(flag = Some(Flag::Off($off));)?
                    out.push(Key {
                        name: concat!($prefix, stringify!($field)),
                        kind: <$ty as Setting>::KIND,
                        doc: concat!($($doc, "\n"),*),
                        flag,
                        values: <$ty as Setting>::VALUES,
                    });
                )*
                $($( <$sty>::keys(out); )*)?
            }
        }
    };
}
pub(crate) use settings;

/// The environment variable for a dotted key.
pub fn env_name(key: &str) -> String {
    format!("ZTSERVE_{}", key.to_uppercase().replace('.', "_"))
}
