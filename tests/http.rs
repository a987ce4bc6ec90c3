//! The HTTP API, end to end: the real `ztserve` binary on 127.0.0.1:0 and
//! curl as the client.

mod common;

use std::time::Duration;

use common::{curl, eventually, sample_root, Server};

fn manifest(server: &Server) -> serde_json::Value {
    let r = curl(&[], &server.url("/v1/files/sample.zt/manifest"));
    assert_eq!(r.status, 200);
    serde_json::from_slice(&r.body).unwrap()
}

#[test]
fn curl_ranges_return_the_files_bytes() {
    let root = sample_root();
    let file = std::fs::read(root.path().join("sample.zt")).unwrap();
    let s = Server::start(root.path(), &[]);
    let url = s.url("/v1/files/sample.zt");

    let r = curl(&["-r", "0-7"], &url);
    assert_eq!((r.status, &r.body[..]), (206, &b"ZTEN1000"[..]));
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes 0-7/{}", file.len()).as_str())
    );
    let r = curl(&["-r", "-16"], &url);
    assert_eq!(r.body, file[file.len() - 16..]);
    assert_eq!(&r.body[8..], b"ZTEN1000");
    let r = curl(&[], &url);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, file);
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert_eq!(r.header("cache-control"), Some("no-cache"));

    // Every component, whole and in part, equals the file's bytes.
    let m = manifest(&s);
    for (name, obj) in m["objects"].as_object().unwrap() {
        let c = &obj["components"]["data"];
        let (off, len) = (
            c["offset"].as_u64().unwrap() as usize,
            c["length"].as_u64().unwrap() as usize,
        );
        let curl_url = s.url(&format!("/v1/files/sample.zt/objects/{name}/data"));
        let r = curl(&[], &curl_url);
        assert_eq!(r.status, 200, "{name}");
        assert_eq!(r.body, file[off..off + len], "{name}");
        assert_eq!(r.header("x-zt-dtype"), c["dtype"].as_str());
        assert_eq!(r.header("x-zt-digest"), c["digest"].as_str());
        assert!(r.header("repr-digest").unwrap().starts_with("sha-256=:"));
        assert_eq!(
            r.header("etag").unwrap(),
            format!("\"sha256-{}\"", &c["digest"].as_str().unwrap()[7..])
        );
        let r = curl(&["-r", "10-19"], &curl_url);
        assert_eq!(r.body, file[off + 10..off + 20], "{name}");
    }
    // HEAD carries the length and no body.
    let r = curl(&["-I"], &url);
    assert_eq!(
        r.header("content-length"),
        Some(file.len().to_string().as_str())
    );
}

#[test]
fn multi_range_and_unsatisfiable_ranges() {
    let root = sample_root();
    let file = std::fs::read(root.path().join("sample.zt")).unwrap();
    let s = Server::start(root.path(), &[]);
    let url = s.url("/v1/files/sample.zt");
    let r = curl(&["-r", "0-3,100-109,102-111"], &url);
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap().to_owned();
    let boundary = ct.split("boundary=").nth(1).unwrap();
    let body = String::from_utf8_lossy(&r.body).into_owned();
    let parts: Vec<&str> = body.split(&format!("--{boundary}")).collect();
    // Overlapping ranges are merged: two parts, then the closing delimiter.
    assert_eq!(parts.len(), 4, "{body}");
    assert!(parts[1].contains("Content-Range: bytes 0-3/"));
    assert!(parts[2].contains("Content-Range: bytes 100-111/"));
    let idx = r.body.windows(4).position(|w| w == b"ZTEN").unwrap();
    assert_eq!(&r.body[idx..idx + 4], &file[0..4]);
    assert_eq!(
        r.header("content-length")
            .unwrap()
            .parse::<usize>()
            .unwrap(),
        r.body.len()
    );

    let r = curl(&["-r", "99999999-"], &url);
    assert_eq!(r.status, 416);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes */{}", file.len()).as_str())
    );
    // Too many ranges after merging.
    let many: Vec<String> = (0..100).map(|i| format!("{}-{}", i * 10, i * 10)).collect();
    let r = curl(&["-r", &many.join(",")], &url);
    assert_eq!(r.status, 416);
}

#[test]
fn conditional_requests() {
    let root = sample_root();
    let s = Server::start(root.path(), &[]);
    let url = s.url("/v1/files/sample.zt");
    let r = curl(&[], &url);
    let etag = r.header("etag").unwrap().to_owned();
    let lm = r.header("last-modified").unwrap().to_owned();
    assert!(etag.starts_with("\"zt-"));
    let r = curl(&["-H", &format!("If-None-Match: {etag}")], &url);
    assert_eq!((r.status, r.body.len()), (304, 0));
    let r = curl(&["-H", "If-None-Match: \"other\""], &url);
    assert_eq!(r.status, 200);
    let r = curl(&["-H", &format!("If-Modified-Since: {lm}")], &url);
    assert_eq!(r.status, 304);
    // If-Range: the range applies only while the validator matches.
    let r = curl(&["-r", "0-7", "-H", &format!("If-Range: {etag}")], &url);
    assert_eq!(r.status, 206);
    let r = curl(&["-r", "0-7", "-H", "If-Range: \"stale\""], &url);
    assert_eq!(r.status, 200);
    // Manifests have their own validators and vary on Accept.
    let m = curl(&[], &s.url("/v1/files/sample.zt/manifest"));
    let vary: Vec<String> = m
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("vary"))
        .map(|(_, v)| v.to_lowercase())
        .collect();
    assert!(
        vary.iter()
            .any(|v| v.split(',').any(|t| t.trim() == "accept")),
        "{vary:?}"
    );
    let e = m.header("etag").unwrap().to_owned();
    let r = curl(
        &["-H", &format!("If-None-Match: {e}")],
        &s.url("/v1/files/sample.zt/manifest"),
    );
    assert_eq!(r.status, 304);
}

/// Issue 26, item 4: `If-Match` and `If-Unmodified-Since` fail with 412
/// on every route that serves bytes or a manifest, as RFC 9110 (13.1.1,
/// 13.1.4) and nginx say, with the precedence of section 13.2.2.
#[test]
fn if_match_and_if_unmodified_since_fail_with_412_as_nginx_does() {
    let root = sample_root();
    let s = Server::start(root.path(), &[]);
    let past = "Sat, 01 Jan 2000 00:00:00 GMT";
    let future = "Fri, 01 Jan 2100 00:00:00 GMT";
    let urls = [
        "/v1/files/sample.zt",
        "/sample.zt",
        "/v1/files/sample.zt/manifest",
        "/v1/files/sample.zt/manifest?select=model.norm.*",
        "/v1/files/sample.zt/objects/model.norm.weight/data",
        "/v1/files/sample.zt/objects",
        "/v1/files/sample.zt/summaries/model.norm.weight",
    ];
    for path in urls {
        let url = s.url(path);
        let r = curl(&[], &url);
        assert_eq!(r.status, 200, "{path}");
        let etag = r.header("etag").unwrap().to_owned();
        let ask = |h: &[&str]| {
            let args: Vec<&str> = h.iter().flat_map(|h| ["-H", *h]).collect();
            curl(&args, &url)
        };
        let m = format!("If-Match: {etag}");
        let r = ask(&["If-Match: \"nope\""]);
        assert_eq!(r.status, 412, "{path}");
        let why = String::from_utf8_lossy(&r.body);
        assert!(
            why.contains("precondition_failed") && why.contains("If-Match"),
            "{why}"
        );
        assert_eq!(ask(&[&m]).status, 200, "{path}");
        assert_eq!(ask(&["If-Match: \"x\", *"]).status, 200, "{path}");
        // A weak tag never matches If-Match (strong comparison).
        assert_eq!(ask(&[&format!("If-Match: W/{etag}")]).status, 412, "{path}");
        let r = ask(&[&format!("If-Unmodified-Since: {past}")]);
        assert_eq!(r.status, 412, "{path}");
        assert!(String::from_utf8_lossy(&r.body).contains("If-Unmodified-Since"));
        assert_eq!(
            ask(&[&format!("If-Unmodified-Since: {future}")]).status,
            200,
            "{path}"
        );
        // If-Match, when present, decides alone (13.2.2 step 2).
        let both = [m.as_str(), &format!("If-Unmodified-Since: {past}")];
        assert_eq!(ask(&both).status, 200, "{path}");
        // A failed If-Match is 412 even where If-None-Match would be 304.
        let r = ask(&["If-Match: \"nope\"", &format!("If-None-Match: {etag}")]);
        assert_eq!(r.status, 412, "{path}");
        assert_eq!(
            ask(&[&format!("If-None-Match: {etag}")]).status,
            304,
            "{path}"
        );
        // Preconditions come before the Range: 412, not 206 or 416.
        let r = curl(&["-r", "0-3", "-H", "If-Match: \"nope\""], &url);
        assert_eq!(r.status, 412, "{path}");
    }
    // A malformed Range is ignored: the whole entity (documented).
    let r = curl(&["-H", "Range: bytes=oops"], &s.url("/sample.zt"));
    assert_eq!(r.status, 200);

    // nginx answers the same for the same file.
    let dir = tempfile::tempdir().unwrap();
    let nginx = common::nginx::Nginx::start(root.path(), common::free_port(), dir.path()).unwrap();
    let url = format!("http://127.0.0.1:{}/sample.zt", nginx.port);
    let theirs = |h: &str| curl(&["-H", h], &url).status;
    assert_eq!(theirs("If-Match: \"nope\""), 412);
    assert_eq!(theirs(&format!("If-Unmodified-Since: {past}")), 412);
    assert_eq!(theirs(&format!("If-Unmodified-Since: {future}")), 200);
}

#[test]
fn versioned_urls_are_immutable_and_cacheable_others_revalidate() {
    let root = sample_root();
    let s = Server::start(root.path(), &[]);
    let component = s.url("/v1/files/sample.zt/objects/model.norm.weight/data");
    let plain = curl(&[], &component);
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("cache-control"), Some("no-cache"));
    let etag = plain.header("etag").unwrap().to_owned();
    assert!(etag.starts_with('"'), "a strong ETag: {etag}");
    let file_etag = curl(&["-I"], &s.url("/v1/files/sample.zt"))
        .header("etag")
        .unwrap()
        .to_owned();
    let v = file_etag.trim_matches('"');
    let immutable = Some("public, max-age=31536000, immutable");

    // Pinned to the file's current ETag: cacheable for a year, same bytes.
    for url in [
        format!("{component}?v={v}"),
        s.url(&format!("/v1/files/sample.zt?v={v}")),
        s.url(&format!("/v1/files/sample.zt/manifest?v={v}")),
    ] {
        let r = curl(&["-r", "0-15"], &url);
        assert!(r.status == 200 || r.status == 206, "{url}: {}", r.status);
        assert_eq!(r.header("cache-control"), immutable, "{url}");
        assert!(r.header("etag").unwrap().starts_with('"'), "{url}");
    }
    let pinned = curl(&[], &format!("{component}?v={v}"));
    assert_eq!(pinned.body, plain.body);
    assert_eq!(pinned.header("etag"), Some(etag.as_str()));

    // Pinned to a version that is not served: refused, so nothing else is
    // ever cached under that URL.
    let stale = curl(&[], &format!("{component}?v=0000"));
    assert_eq!(stale.status, 412);
    assert_ne!(stale.header("cache-control"), immutable);
    let body = String::from_utf8_lossy(&stale.body);
    assert!(body.contains("version_gone") && body.contains(v), "{body}");
}

#[test]
fn manifests_in_json_and_cbor_with_selections() {
    let root = sample_root();
    let file = std::fs::read(root.path().join("sample.zt")).unwrap();
    let s = Server::start(root.path(), &[]);
    let m = manifest(&s);
    assert_eq!(m["schema"], "ztserve.manifest/1");
    assert_eq!(m["objects"].as_object().unwrap().len(), 39);
    // CBOR: the file's own bytes when unfiltered.
    let n = u64::from_le_bytes(file[file.len() - 16..file.len() - 8].try_into().unwrap()) as usize;
    let own = &file[file.len() - 16 - n..file.len() - 16];
    for args in [vec!["-H", "Accept: application/cbor"], vec![]] {
        let url = if args.is_empty() {
            s.url("/v1/files/sample.zt/manifest?format=cbor")
        } else {
            s.url("/v1/files/sample.zt/manifest")
        };
        let r = curl(&args, &url);
        assert_eq!(r.header("content-type"), Some("application/cbor"));
        assert_eq!(r.header("x-zt-manifest-source"), Some("file"));
        assert_eq!(r.body, own);
    }
    let r = curl(&[], &s.url("/v1/files/sample.zt/manifest?select=model.layers.0.*&select=lm_head.weight&format=cbor"));
    assert_eq!(r.header("x-zt-manifest-source"), Some("re-encoded"));
    let v: ciborium::Value = ciborium::de::from_reader(&r.body[..]).unwrap();
    let objects = v
        .as_map()
        .unwrap()
        .iter()
        .find(|(k, _)| k.as_text() == Some("objects"))
        .unwrap()
        .1
        .as_map()
        .unwrap();
    assert_eq!(objects.len(), 10);
    let r = curl(&[], &s.url("/v1/files/sample.zt/manifest?select=nothing*"));
    assert_eq!(r.status, 404);
    assert!(String::from_utf8_lossy(&r.body).contains("nothing*"));
    // Large JSON is compressed when the client asks.
    let r = curl(
        &["-H", "Accept-Encoding: gzip"],
        &s.url("/v1/files/sample.zt/manifest"),
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
}

#[test]
fn hostile_paths_get_404_and_the_daemon_stays_up() {
    let root = sample_root();
    let outside = root
        .path()
        .parent()
        .unwrap()
        .join(format!("outside-{}.zt", std::process::id()));
    std::fs::copy(common::repo().join("models/sample.zt"), &outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.path().join("link-out.zt")).unwrap();
    // Symlinks inside the root to what the root hides: a dot folder's
    // file, a dot folder, a file still being written.
    let hidden = root.path().join(".git");
    std::fs::create_dir(&hidden).unwrap();
    std::fs::copy(
        common::repo().join("models/sample.zt"),
        hidden.join("secret.zt"),
    )
    .unwrap();
    std::fs::copy(
        common::repo().join("models/sample.zt"),
        root.path().join("half.zt.part"),
    )
    .unwrap();
    std::os::unix::fs::symlink(hidden.join("secret.zt"), root.path().join("link-dot.zt")).unwrap();
    std::os::unix::fs::symlink(&hidden, root.path().join("linkdir")).unwrap();
    std::os::unix::fs::symlink(
        root.path().join("half.zt.part"),
        root.path().join("link-part.zt"),
    )
    .unwrap();
    // git-annex's object store is what its working trees link into.
    let annexed = root.path().join(".git/annex/objects/Ab/Cd/KEY");
    std::fs::create_dir_all(&annexed).unwrap();
    std::fs::copy(common::repo().join("models/sample.zt"), annexed.join("KEY")).unwrap();
    std::os::unix::fs::symlink(annexed.join("KEY"), root.path().join("annexed.zt")).unwrap();
    let s = Server::start(root.path(), &[]);
    for p in [
        "/v1/files/../sample.zt",
        "/v1/files/%2e%2e/sample.zt",
        "/v1/files/sub/%2e%2e/sample.zt",
        "/v1/files/sub%2f..%2fsample.zt",
        "/v1/files/..%5csample.zt",
        "/v1/files//etc/passwd",
        "/v1/files/%2fetc%2fpasswd",
        "/v1/files/link-out.zt",
        "/v1/files/link-dot.zt",
        "/v1/files/linkdir/secret.zt",
        "/v1/files/link-part.zt",
        "/v1/files/sample.zt%00",
        "/v1/files/sample.zt/objects/%2e%2e/data",
        "/v1/files/sample.zt/objects/lm_head.weight/../../sample.zt",
        "/v1/files/nope.zt",
    ] {
        // Each again at the plain path (`/v1/files` dropped).
        let plain = p.strip_prefix("/v1/files").unwrap();
        for p in [p, plain] {
            let r = curl(&[], &s.url(p));
            assert_eq!(r.status, 404, "{p}");
            assert!(
                serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["error"].is_string(),
                "{p}"
            );
        }
    }
    assert_eq!(curl(&[], &s.url("/healthz")).status, 200);
    // ...and served through the link; nothing else of `.git/` is.
    assert_eq!(
        curl(&[], &s.url("/v1/files/annexed.zt/manifest")).status,
        200
    );
    assert_eq!(
        curl(&[], &s.url("/.git/annex/objects/Ab/Cd/KEY/KEY")).status,
        404
    );
    let _ = std::fs::remove_file(outside);
}

#[test]
fn bad_files_are_listed_as_unavailable_and_good_ones_served() {
    let root = sample_root();
    std::fs::write(
        root.path().join("garbage.zt"),
        b"this is not a tensor file at all",
    )
    .unwrap();
    std::fs::write(root.path().join(".hidden.zt"), b"x").unwrap();
    std::fs::write(root.path().join("half.zt.part"), b"x").unwrap();
    let s = Server::start(root.path(), &[]);
    let r = curl(&[], &s.url("/v1/files"));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let served: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(served, ["sample.zt"]);
    let bad: Vec<&str> = v["unavailable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(bad, ["garbage.zt", "sub/broken.zt"]);
    assert!(v["unavailable"][1]["reason"]
        .as_str()
        .unwrap()
        .contains("overlap"));
    let r = curl(&[], &s.url("/v1/files/sub/broken.zt"));
    assert_eq!(r.status, 409);
    assert!(String::from_utf8_lossy(&r.body).contains("overlap"));
    assert_eq!(curl(&[], &s.url("/v1/files/.hidden.zt")).status, 404);
}

#[test]
fn hot_reload_of_new_deleted_renamed_and_truncated_files() {
    let root = sample_root();
    let s = Server::start(root.path(), &[]);
    let listed = |name: &str| {
        let v: serde_json::Value =
            serde_json::from_slice(&curl(&[], &s.url("/v1/files")).body).unwrap();
        v["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"] == name)
    };
    let sample = std::fs::read(root.path().join("sample.zt")).unwrap();
    // New file (written under a temporary name, then renamed: never listed as broken).
    std::fs::write(root.path().join(".new.zt.tmp"), &sample).unwrap();
    std::fs::rename(root.path().join(".new.zt.tmp"), root.path().join("new.zt")).unwrap();
    assert!(eventually(Duration::from_secs(10), || listed("new.zt")));
    // Deleted.
    std::fs::remove_file(root.path().join("new.zt")).unwrap();
    assert!(eventually(Duration::from_secs(10), || !listed("new.zt")));
    // Replaced by rename: new content, new ETag.
    let url = s.url("/v1/files/sample.zt");
    let old = curl(&[], &url).header("etag").unwrap().to_owned();
    let mut w = zt_format::Writer::new(Vec::new(), "x").unwrap();
    w.add_dense(
        "only",
        &[4],
        zt_format::DType::U8,
        &[1, 2, 3, 4],
        Default::default(),
    )
    .unwrap();
    std::fs::write(root.path().join(".r.tmp"), w.finish().unwrap()).unwrap();
    std::fs::rename(root.path().join(".r.tmp"), root.path().join("sample.zt")).unwrap();
    assert!(eventually(Duration::from_secs(10), || curl(&[], &url)
        .header("etag")
        .is_some_and(|e| e != old)));
    assert_eq!(manifest(&s)["objects"].as_object().unwrap().len(), 1);
    // Truncated in place: the daemon survives; the file becomes unavailable.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(root.path().join("sample.zt"))
        .unwrap();
    f.set_len(100).unwrap();
    let _ = curl(&[], &url);
    assert!(eventually(Duration::from_secs(10), || curl(&[], &url)
        .status
        == 409));
    assert_eq!(curl(&[], &s.url("/healthz")).status, 200);
}

#[test]
fn metrics_use_route_templates() {
    let root = sample_root();
    let s = Server::start(root.path(), &[]);
    curl(&[], &s.url("/v1/files/sample.zt/manifest"));
    curl(&["-r", "0-7"], &s.url("/v1/files/sample.zt"));
    curl(
        &[],
        &s.url("/v1/files/sample.zt/objects/lm_head.weight/data"),
    );
    curl(&[], &s.url("/v1/files/secret-name-123.zt"));
    let text = String::from_utf8(curl(&[], &s.url("/metrics")).body).unwrap();
    assert!(
        text.contains(
            "ztserve_http_requests_total{route=\"/v1/files/{path}/manifest\",status=\"200\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("route=\"/v1/files/{path}\",status=\"206\""));
    assert!(text.contains("route=\"/v1/files/{path}/objects/{name}/{component}\",status=\"200\""));
    assert!(text.contains("ztserve_files{state=\"served\"} 1"));
    assert!(text.contains("ztserve_files{state=\"unavailable\"} 1"));
    assert!(text.contains("ztserve_http_request_duration_seconds_bucket"));
    assert!(!text.contains("secret-name-123"));
    let bytes: u64 = text
        .lines()
        .find(|l| l.starts_with("ztserve_bytes_sent_total"))
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(bytes >= 256_000 + 8);
}

/// Issue 26, item 7: every metric family `/metrics` exports is in
/// docs/http-api.md's table, with its type, and every family the table
/// lists for a local root is exported (the *store* ones:
/// tests/store_root.rs).
#[test]
fn every_metric_is_documented() {
    let root = sample_root();
    let s = Server::start(root.path(), &[]);
    // Families labelled by route show from their first request on.
    text(&s, "/healthz");
    let exported = common::exported_metrics(&text(&s, "/metrics"));
    let documented = common::documented_metrics();
    assert!(documented.len() >= 20, "{documented:?}");
    for (name, kind) in &exported {
        let doc = documented.iter().find(|(n, _, _)| n == name);
        assert_eq!(
            doc.map(|(_, k, _)| k.as_str()),
            Some(kind.as_str()),
            "{name} ({kind}) is exported: document it in docs/http-api.md"
        );
    }
    for (name, _, store) in &documented {
        assert_eq!(
            exported.contains_key(name),
            !store,
            "{name}: documented, exported only with a store root: {store}"
        );
    }
}

fn text(s: &Server, path: &str) -> String {
    String::from_utf8(curl(&[], &s.url(path)).body).unwrap()
}

#[test]
fn cors_exposes_the_headers_a_browser_needs() {
    let root = sample_root();
    let s = Server::start(root.path(), &[]);
    let r = curl(
        &["-H", "Origin: https://app.example"],
        &s.url("/v1/files/sample.zt/objects/lm_head.weight/data"),
    );
    assert!(
        r.header("access-control-allow-origin").is_none(),
        "CORS is off by default"
    );
    drop(s);
    let cfg = root
        .path()
        .join("..")
        .join(format!("cors-{}.toml", std::process::id()));
    std::fs::write(
        &cfg,
        "root = \"/unused\"\n[cors]\nallow_origins = [\"https://app.example\"]\n",
    )
    .unwrap();
    let s = Server::start(root.path(), &["--config", cfg.to_str().unwrap()]);
    let r = curl(
        &["-H", "Origin: https://app.example"],
        &s.url("/v1/files/sample.zt/objects/lm_head.weight/data"),
    );
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let expose = r
        .header("access-control-expose-headers")
        .unwrap()
        .to_lowercase();
    for h in [
        "etag",
        "content-range",
        "x-zt-dtype",
        "x-zt-shape",
        "x-zt-digest",
    ] {
        assert!(expose.contains(h), "{expose}");
    }
    let r = curl(
        &[
            "-X",
            "OPTIONS",
            "-H",
            "Origin: https://app.example",
            "-H",
            "Access-Control-Request-Method: GET",
            "-H",
            "Access-Control-Request-Headers: range",
        ],
        &s.url("/v1/files/sample.zt"),
    );
    assert_eq!(r.status, 200);
    assert!(r
        .header("access-control-allow-headers")
        .unwrap()
        .contains("range"));
    let _ = std::fs::remove_file(cfg);
}

#[test]
fn graceful_shutdown_finishes_requests_in_flight() {
    let root = sample_root();
    let big = big_file();
    std::fs::write(root.path().join("big.zt"), &big).unwrap();
    let mut s = Server::start(root.path(), &[]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("body");
    // About 4 s at this rate, and larger than the socket buffers: the
    // server is still reading the file when the signal arrives.
    let mut slow = slow_download(&s.url("/v1/files/big.zt"), &out);
    std::thread::sleep(Duration::from_millis(700));
    s.terminate();
    assert!(eventually(Duration::from_secs(3), || curl(
        &[],
        &s.url("/readyz")
    )
    .status
        != 200));
    assert!(slow.wait().unwrap().success());
    assert!(std::fs::read(&out).unwrap() == big);
    assert_eq!(s.wait(Duration::from_secs(20)), Some(0));
}

#[test]
fn periodic_rescans_work_without_file_events() {
    let root = sample_root();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        "root = \"/unused\"\n[catalog]\nwatch = false\nrescan_interval_secs = 1\n",
    )
    .unwrap();
    let s = Server::start(root.path(), &["--config", cfg.to_str().unwrap()]);
    std::fs::copy(
        common::repo().join("models/sample.zt"),
        root.path().join("late.zt"),
    )
    .unwrap();
    assert!(eventually(Duration::from_secs(10), || curl(
        &[],
        &s.url("/v1/files/late.zt/manifest")
    )
    .status
        == 200));
    let v: serde_json::Value =
        serde_json::from_slice(&curl(&[], &s.url("/v1/files")).body).unwrap();
    let modified = v["files"][0]["modified"].as_str().unwrap();
    assert!(
        modified.ends_with('Z') && modified.contains('T'),
        "RFC 3339: {modified}"
    );
}

/// Starts a rate-limited download (about 4 s for 40 MB) into `out`.
fn slow_download(url: &str, out: &std::path::Path) -> std::process::Child {
    std::process::Command::new("curl")
        .args(["-s", "--limit-rate", "10M", "-o"])
        .arg(out)
        .arg(url)
        .spawn()
        .unwrap()
}

/// A 40 MB file: larger than what loopback socket buffers absorb, so a
/// throttled client keeps the server reading from the file for seconds.
fn big_file() -> Vec<u8> {
    let data: Vec<u8> = (0..40u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let mut w = zt_format::Writer::new(Vec::new(), "big").unwrap();
    w.add_dense(
        "w",
        &[data.len() as u64],
        zt_format::DType::U8,
        &data,
        Default::default(),
    )
    .unwrap();
    w.finish().unwrap()
}

#[test]
fn responses_in_flight_survive_rename_and_fail_cleanly_on_truncation() {
    let root = sample_root();
    let big = big_file();
    std::fs::write(root.path().join("big.zt"), &big).unwrap();
    std::fs::write(root.path().join("big2.zt"), &big).unwrap();
    let s = Server::start(root.path(), &[]);
    let dir = tempfile::tempdir().unwrap();

    // Replaced by rename mid-transfer: the old, consistent bytes arrive in full.
    let out = dir.path().join("renamed");
    let mut slow = slow_download(&s.url("/v1/files/big.zt"), &out);
    std::thread::sleep(Duration::from_millis(800));
    let mut w = zt_format::Writer::new(Vec::new(), "x").unwrap();
    w.add_dense(
        "other",
        &[8],
        zt_format::DType::U8,
        &[9; 8],
        Default::default(),
    )
    .unwrap();
    std::fs::write(root.path().join(".swap.tmp"), w.finish().unwrap()).unwrap();
    std::fs::rename(root.path().join(".swap.tmp"), root.path().join("big.zt")).unwrap();
    assert!(slow.wait().unwrap().success());
    assert!(std::fs::read(&out).unwrap() == big, "old bytes, complete");

    // Truncated in place mid-transfer: the response ends early, nothing
    // that looks complete arrives, and the daemon keeps serving.
    let out = dir.path().join("truncated");
    let mut slow = slow_download(&s.url("/v1/files/big2.zt"), &out);
    std::thread::sleep(Duration::from_millis(800));
    std::fs::OpenOptions::new()
        .write(true)
        .open(root.path().join("big2.zt"))
        .unwrap()
        .set_len(1000)
        .unwrap();
    let status = slow.wait().unwrap();
    assert!(!status.success(), "curl must see the transfer cut short");
    assert!(std::fs::read(&out).unwrap().len() < big.len());
    assert_eq!(curl(&[], &s.url("/healthz")).status, 200);
    assert_eq!(
        curl(&["-r", "0-7"], &s.url("/v1/files/sample.zt")).status,
        206
    );
}

#[test]
fn plain_paths_serve_the_raw_file_as_the_api_does() {
    let root = sample_root();
    // Files under reserved prefixes stay reachable through the API only.
    for dir in ["metrics", "ui", "v1"] {
        std::fs::create_dir_all(root.path().join(dir)).unwrap();
        std::fs::copy(
            root.path().join("sample.zt"),
            root.path().join(dir).join("m.zt"),
        )
        .unwrap();
    }
    let s = Server::start(root.path(), &[]);
    let file = std::fs::read(root.path().join("sample.zt")).unwrap();
    let api = curl(&[], &s.url("/v1/files/sample.zt"));
    let plain = curl(&[], &s.url("/sample.zt"));
    assert_eq!(plain.status, 200);
    assert_eq!(plain.body, file);
    assert_eq!(plain.header("etag"), api.header("etag"));
    assert!(plain.header("etag").is_some());
    for r in [&api, &plain] {
        assert_eq!(
            r.header("link"),
            Some("</v1/files/sample.zt/manifest>; rel=\"describedby\"")
        );
    }
    // Ranges, HEAD and conditionals behave as on the API's path.
    let r = curl(&["-r", "0-7"], &s.url("/sample.zt"));
    assert_eq!((r.status, r.body.as_slice()), (206, &b"ZTEN1000"[..]));
    let r = curl(&["-r", "-16"], &s.url("/sample.zt"));
    assert_eq!(r.body, file[file.len() - 16..]);
    let r = curl(&["-I"], &s.url("/sample.zt"));
    assert_eq!(
        r.header("content-length"),
        Some(file.len().to_string().as_str())
    );
    let etag = api.header("etag").unwrap();
    let r = curl(
        &["-H", &format!("If-None-Match: {etag}")],
        &s.url("/sample.zt"),
    );
    assert_eq!(r.status, 304);
    let r = curl(&["-r", "999999999-"], &s.url("/sample.zt"));
    assert_eq!(r.status, 416);
    // Only the file: its manifest and components are the API's.
    let r = curl(&[], &s.url("/sample.zt/manifest"));
    assert_eq!(r.status, 404);
    assert!(String::from_utf8_lossy(&r.body).contains("/v1/files/"));
    // Reserved prefixes win over file paths.
    for dir in ["metrics", "ui", "v1"] {
        assert_eq!(
            curl(&[], &s.url(&format!("/{dir}/m.zt"))).status,
            404,
            "{dir}"
        );
        let r = curl(&[], &s.url(&format!("/v1/files/{dir}/m.zt")));
        assert_eq!((r.status, r.body.len()), (200, file.len()), "{dir}");
    }
    // Other methods are not files; the root is the web page's.
    assert_eq!(curl(&["-X", "POST"], &s.url("/sample.zt")).status, 404);
    let root = curl(&[], &s.url("/"));
    assert_eq!(root.status, 302);
    assert_eq!(root.header("location"), Some("/ui/"));
}
