//! What a URL's path names. HTTP sends the path as the URL spells it
//! (percent-encoded, and the server decodes it); ztp/1's `get.path` is the
//! file's path itself, decoded UTF-8 (PROTOCOL.md, section 4), so a file
//! named `sub dir/café.zt` is asked for by that name and not as
//! `sub%20dir/caf%C3%A9.zt`, which no server holds.

use percent_encoding::percent_decode_str;

use crate::error::{Error, Result};

/// The file `url` names on a ztserve, as ztp/1's `get.path` carries it:
/// the URL's path without its leading `/` (or ztserve's `/v1/files/`),
/// percent-decoded. A path that decodes to bytes that are not UTF-8, or to
/// a NUL, is refused by name: no file on any server has such a name, and
/// the server could only answer `not_found` about some other one.
pub fn ztp_path(url: &str) -> Result<String> {
    let u = url::Url::parse(url).map_err(|e| Error::Usage(format!("bad URL {url:?}: {e}")))?;
    let path = u.path();
    let file = path
        .strip_prefix("/v1/files/")
        .unwrap_or(path)
        .trim_start_matches('/');
    decode(url, file)
}

/// `encoded` (a part of `url`'s path) percent-decoded, as UTF-8 without NUL.
fn decode(url: &str, encoded: &str) -> Result<String> {
    let bytes: Vec<u8> = percent_decode_str(encoded).collect();
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::Usage(format!(
            "{url}: the path is not UTF-8 once percent-decoded (byte {} of {encoded:?} starts an invalid sequence); a ztp/1 path is the file's UTF-8 name",
            e.utf8_error().valid_up_to()
        ))
    })?;
    if text.contains('\0') {
        return Err(Error::Usage(format!(
            "{url}: the path holds a NUL character (%00) once percent-decoded; no file name can"
        )));
    }
    Ok(text)
}

/// The name of the file `url` ends in, decoded (`caf%C3%A9.zt` is
/// `café.zt`): what a download is called by default. `None` when the last
/// segment is empty, not UTF-8, or not a name a local file can take (`.`,
/// `..`, or one that decodes to a `/` or a NUL).
pub fn file_name(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    let last = u.path_segments()?.next_back()?;
    let name = decode(url, last).ok()?;
    let usable = !name.is_empty() && name != "." && name != ".." && !name.contains('/');
    usable.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ztp_paths_are_the_decoded_names() {
        let p = |u: &str| ztp_path(u).unwrap();
        assert_eq!(p("quic://h:7070/sub%20dir/m.zt"), "sub dir/m.zt");
        assert_eq!(p("quic://h:7070/caf%C3%A9.zt"), "café.zt");
        assert_eq!(
            p("quic://h/café.zt"),
            "café.zt",
            "as typed, encoded by the parser"
        );
        assert_eq!(
            p("quic://h/a+b=c%25d.zt"),
            "a+b=c%d.zt",
            "+ is no space in a path"
        );
        assert_eq!(p("quic://h/v1/files/x/y%3Fz.zt"), "x/y?z.zt");
        assert_eq!(p("quic://h/%zz.zt"), "%zz.zt", "no escape: kept as written");
    }

    #[test]
    fn paths_that_name_no_file_are_refused_by_name() {
        let e = ztp_path("quic://h/caf%E9.zt").unwrap_err();
        assert!(
            matches!(&e, Error::Usage(m) if m.contains("not UTF-8")),
            "{e}"
        );
        let e = ztp_path("quic://h/a%00b.zt").unwrap_err();
        assert!(matches!(&e, Error::Usage(m) if m.contains("NUL")), "{e}");
    }

    #[test]
    fn file_names_are_decoded_and_local() {
        assert_eq!(
            file_name("quic://h/d/caf%C3%A9%20x.zt?v=1").as_deref(),
            Some("café x.zt")
        );
        assert_eq!(file_name("http://h/a%2Fb.zt"), None);
        assert_eq!(file_name("http://h/dir/"), None);
        assert_eq!(file_name("http://h/%2E%2E"), None);
    }
}
