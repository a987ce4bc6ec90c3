//! The web page over plain HTTP (curl): `/` redirects to `/ui/`, which
//! lists the files in its HTML (when no token is configured) with every
//! name escaped, a hostile file name included; the pages and assets carry
//! a strict Content-Security-Policy and no inline script; with a token
//! configured the page is served without one but lists nothing itself,
//! and the API it reads still needs the token; `--no-ui` turns it off.

mod common;

use common::{curl, Server};

/// A name made of markup and script: it must render as text.
const HOSTILE: &str = "<img src=x onerror=alert(1)>'$(touch pwned)'.zt";

/// A name whose right-to-left override makes it read `eviltz.jpg`.
const BIDI: &str = "evil\u{202E}gpj.zt";

fn root() -> tempfile::TempDir {
    let root = common::sample_root();
    for name in [HOSTILE, BIDI] {
        std::fs::copy(
            common::repo().join("models/sample.zt"),
            root.path().join(name),
        )
        .unwrap();
    }
    root
}

fn text(r: &common::Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// Every `<script` has a `src`: nothing inline.
fn no_inline_script(html: &str) {
    for part in html.split("<script").skip(1) {
        let tag = part.split('>').next().unwrap_or_default();
        assert!(tag.contains("src=\"/ui/"), "inline script: <script{tag}>");
    }
}

fn strict(r: &common::Reply) {
    let csp = r.header("content-security-policy").unwrap_or_default();
    for want in [
        "default-src 'none'",
        "script-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(want), "{csp}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
}

#[test]
fn the_listing_escapes_names_and_carries_a_strict_policy() {
    let root = root();
    let s = Server::start(root.path(), &[]);
    let r = curl(&[], &s.url("/"));
    assert_eq!((r.status, r.header("location")), (302, Some("/ui/")));
    let r = curl(&[], &s.url("/ui/"));
    assert_eq!(r.status, 200);
    strict(&r);
    let html = text(&r);
    no_inline_script(&html);
    assert!(html.contains(">sample.zt</a>"), "{html}");
    assert!(
        html.contains("&lt;img src=x onerror=alert(1)&gt;&#39;$(touch pwned)&#39;.zt"),
        "{html}"
    );
    assert!(!html.contains("<img"), "{html}");
    // Issue 26, item 7: bidirectional controls are shown, not obeyed.
    assert!(html.contains(">evil&lt;U+202E&gt;gpj.zt</a>"), "{html}");
    assert!(!html.contains('\u{202E}'), "{html}");
    let page = text(&curl(&[], &s.url("/ui/files/evil%E2%80%AEgpj.zt")));
    assert!(
        page.contains("<h1 id=\"title\">evil&lt;U+202E&gt;gpj.zt</h1>"),
        "{page}"
    );
    // The script reads the exact name back from its attribute.
    assert!(page.contains("data-path=\"evil\u{202E}gpj.zt\""), "{page}");
    // Links are percent-encoded.
    assert!(
        html.contains("/ui/files/%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E"),
        "{html}"
    );
    // The file that is not served, with its reason.
    assert!(
        html.contains("sub/broken.zt") && html.contains("overlap"),
        "{html}"
    );

    let page = curl(&[], &s.url("/ui/files/%3Cimg%20src%3Dx%3E.zt"));
    assert_eq!(page.status, 200);
    strict(&page);
    let html = text(&page);
    no_inline_script(&html);
    assert!(
        html.contains("data-path=\"&lt;img src=x&gt;.zt\""),
        "{html}"
    );
    assert!(!html.contains("<img"), "{html}");
    for (asset, kind) in [
        ("/ui/app.js", "text/javascript"),
        ("/ui/style.css", "text/css"),
    ] {
        let r = curl(&[], &s.url(asset));
        assert_eq!(r.status, 200, "{asset}");
        strict(&r);
        assert!(
            r.header("content-type")
                .unwrap_or_default()
                .starts_with(kind),
            "{asset}"
        );
    }
    // The script writes names as text only.
    let js = text(&curl(&[], &s.url("/ui/app.js")));
    assert!(
        !js.contains("innerHTML") && !js.contains("insertAdjacentHTML"),
        "markup from strings"
    );
    assert_eq!(curl(&[], &s.url("/ui/nothing")).status, 404);
}

#[test]
fn with_a_token_the_page_lists_nothing_itself_and_the_api_still_asks() {
    let root = root();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "ui-token\n").unwrap();
    let s = Server::start(root.path(), &["--token-file", tokens.to_str().unwrap()]);
    let r = curl(&[], &s.url("/ui/"));
    assert_eq!(r.status, 200);
    let html = text(&r);
    assert!(!html.contains("sample.zt"), "{html}");
    assert!(html.contains("needs a token"), "{html}");
    assert_eq!(curl(&[], &s.url("/ui/app.js")).status, 200);
    assert_eq!(curl(&[], &s.url("/v1/files")).status, 401);
    let r = curl(
        &["-H", "Authorization: Bearer ui-token"],
        &s.url("/v1/files"),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn no_ui_turns_the_page_off() {
    let root = root();
    let s = Server::start(root.path(), &["--no-ui"]);
    for path in ["/", "/ui/", "/ui/app.js", "/ui/files/sample.zt"] {
        assert_eq!(curl(&[], &s.url(path)).status, 404, "{path}");
    }
    assert_eq!(curl(&[], &s.url("/v1/files")).status, 200);
}
