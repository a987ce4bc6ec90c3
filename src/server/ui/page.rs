//! The pages' HTML: a shell the script fills in, and, on `/ui/` when no
//! token is configured, the listing itself. Every name from a file is
//! escaped here ([`escape`]) and percent-encoded in links.

use std::fmt::Write as _;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::server::State;

/// Characters left as they are in a link's path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Text made safe for HTML content and attribute values.
pub(super) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `s` as the text of an element: [`visible`], then escaped.
pub(super) fn text(s: &str) -> String {
    escape(&visible(s))
}

/// Unicode's bidirectional controls written out (`<U+202E>`), as GitHub
/// shows them: in a name they make it read as another (`evil<U+202E>gpj.zt`
/// would read `eviltz.jpg`). Names in attributes that the script reads
/// back (`data-path`) stay exact.
pub(super) fn visible(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(is_bidi_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if is_bidi_control(c) {
            let _ = write!(out, "<U+{:04X}>", u32::from(c));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The formatting characters that reorder text: the embeddings and
/// overrides, the isolates, and the marks.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// A catalog path as a link under `/ui/files/`, each segment encoded.
fn link(path: &str) -> String {
    let segs: Vec<String> = path
        .split('/')
        .map(|s| utf8_percent_encode(s, SEGMENT).to_string())
        .collect();
    format!("/ui/files/{}", segs.join("/"))
}

fn shell(title: &str, body: &str, data: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{}</title><link rel=\"stylesheet\" href=\"/ui/style.css\"><script src=\"/ui/app.js\" defer></script></head>\n<body><header><a href=\"/ui/\" class=\"home\">ztserve</a><span id=\"who\"></span></header><main id=\"app\" {data}>{body}</main></body></html>\n",
        text(title)
    )
}

/// `/ui/`: the shell, with the listing when no token is configured.
pub(super) fn listing(state: &State) -> String {
    let mut body = String::from("<h1>Files</h1>");
    if state.tokens.is_some() {
        body.push_str("<p id=\"static-note\">This server needs a token: the list appears once JavaScript has it.</p>");
        return shell("ztserve: files", &body, "data-page=\"listing\"");
    }
    let snap = state.catalog.snapshot();
    body.push_str("<table id=\"files\"><thead><tr><th>path</th><th>source</th><th>size</th><th>objects</th><th>version</th><th>ETag</th><th>changed</th></tr></thead><tbody>");
    // As `GET /v1/files` lists them.
    for f in snap.listing() {
        let _ = write!(
            body,
            "<tr><td><a href=\"{}\">{}</a></td><td>{}</td><td data-n=\"{}\">{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            escape(&link(f.path)),
            text(f.path),
            escape(f.source),
            f.size,
            f.size,
            f.objects,
            escape(f.version),
            escape(f.etag),
            escape(&httpdate::fmt_http_date(f.modified)),
        );
    }
    body.push_str("</tbody></table>");
    let unavailable: Vec<_> = snap.unavailable().collect();
    if !unavailable.is_empty() {
        body.push_str("<h2>Not served</h2><table id=\"unavailable\"><thead><tr><th>path</th><th>size</th><th>reason</th></tr></thead><tbody>");
        for u in unavailable {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                text(&u.path),
                u.size,
                text(&u.reason)
            );
        }
        body.push_str("</tbody></table>");
    }
    shell("ztserve: files", &body, "data-page=\"listing\"")
}

/// `/ui/files/{rest}`: the shell the script fills in for one file.
pub(super) fn file(rest: &str) -> String {
    let path = percent_encoding::percent_decode_str(rest)
        .decode_utf8_lossy()
        .into_owned();
    let body = format!(
        "<h1 id=\"title\">{}</h1><noscript><p>This page needs JavaScript; the file's manifest is at <a href=\"/v1/files/{}/manifest\">its manifest</a>.</p></noscript>",
        text(&path),
        escape(rest)
    );
    shell(
        &format!("ztserve: {path}"),
        &body,
        &format!("data-page=\"file\" data-path=\"{}\"", escape(&path)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_and_links_encoded() {
        assert_eq!(
            escape("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"
        );
        assert_eq!(link("a b/<c>.zt"), "/ui/files/a%20b/%3Cc%3E.zt");
        let page = file("%3Cimg%20src%3Dx%3E.zt");
        assert!(page.contains("&lt;img src=x&gt;.zt"), "{page}");
        assert!(!page.contains("<img"), "{page}");
    }
}
