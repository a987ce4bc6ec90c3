//! The Hugging Face Hub's protocol at the HTTP level, against the real
//! daemon with curl: the headers the Hub's clients read, ranges and
//! conditionals on a repository's files, a model file's digests checked
//! before its bytes go out, a file changed under a listing, paged trees,
//! the daemon's own state never served, and `--no-hub`. The clients
//! themselves (huggingface_hub, `hf`, transformers) are driven in
//! tests/interop/test_hub.py.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{curl, Server};

/// A root with the repository `org/m`: a config, a README and a `.zt`
/// model of two 1 MiB layers.
fn repo_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let m = root.path().join("org/m");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(m.join("config.json"), br#"{"model_type":"bert"}"#).unwrap();
    std::fs::write(m.join("README.md"), b"# m\n").unwrap();
    common::layered_model(&m.join("model.zt"), [0, 1]);
    root
}

/// 40 lowercase hex digits: the shape of the Hub's object ids.
fn is_oid(s: &str) -> bool {
    s.len() == 40
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn json(r: &common::Reply) -> serde_json::Value {
    serde_json::from_slice(&r.body).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&r.body));
    })
}

#[test]
fn a_file_is_served_with_the_headers_the_hubs_clients_read() {
    let root = repo_root();
    let s = Server::start(root.path(), &[]);
    let model = root.path().join("org/m/model.zt");
    let bytes = std::fs::read(&model).unwrap();

    let info = curl(&[], &s.url("/api/models/org/m"));
    assert_eq!(info.status, 200);
    let info = json(&info);
    let sha = info["sha"].as_str().unwrap().to_owned();
    assert_eq!(sha.len(), 40);
    assert_eq!(info["id"], "org/m");
    let names: Vec<&str> = info["siblings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["rfilename"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["README.md", "config.json", "model.zt"]);
    // A HEAD of the information is its GET without the body.
    let head = curl(&["-I"], &s.url("/api/models/org/m"));
    // (`curl -I` writes the headers where a body would go.)
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-type"), Some("application/json"));
    let length = head.header("content-length").map(str::to_owned);
    assert_eq!(
        length,
        Some(
            curl(&[], &s.url("/api/models/org/m"))
                .body
                .len()
                .to_string()
        )
    );

    // `main` moves: it leads to the file at the current commit, with its
    // headers, by a relative redirect.
    let moved = curl(&["-I"], &s.url("/org/m/resolve/main/model.zt"));
    assert_eq!(moved.status, 302);
    let location = format!("/org/m/resolve/{sha}/model.zt");
    assert_eq!(moved.header("location"), Some(location.as_str()));
    // Under a proxy's path, it stays there; a prefix that could lead
    // elsewhere is not taken.
    for (prefix, under) in [("/mirror/", "/mirror"), ("//evil.example", "")] {
        let moved = curl(
            &["-I", "-H", &format!("X-Forwarded-Prefix: {prefix}")],
            &s.url("/org/m/resolve/main/model.zt"),
        );
        let location = format!("{under}/org/m/resolve/{sha}/model.zt");
        assert_eq!(moved.header("location"), Some(location.as_str()));
    }
    assert_eq!(moved.header("x-repo-commit"), Some(sha.as_str()));
    // As does `main` by its full name, one encoded segment.
    let full = curl(
        &["-I"],
        &s.url("/org/m/resolve/refs%2Fheads%2Fmain/model.zt"),
    );
    assert_eq!(full.status, 302);
    assert_eq!(full.header("location"), Some(location.as_str()));
    // HEAD, by `main` (followed) and by the commit: the same headers.
    for (rev, follow) in [("main", "-L"), (sha.as_str(), "-s")] {
        let head = curl(
            &["-I", follow],
            &s.url(&format!("/org/m/resolve/{rev}/model.zt")),
        );
        assert_eq!(head.status, 200, "{rev}");
        assert_eq!(head.header("x-repo-commit"), Some(sha.as_str()));
        assert_eq!(
            head.header("content-length"),
            Some(bytes.len().to_string().as_str())
        );
        let etag = head.header("etag").unwrap();
        assert!(is_oid(etag.trim_matches('"')), "{etag}");
        // A model file is sent with the headers of the Hub's LFS files.
        assert_eq!(head.header("x-linked-etag"), Some(etag));
        assert_eq!(
            head.header("x-linked-size"),
            Some(bytes.len().to_string().as_str())
        );
    }

    // The whole file, a range, a resumed download, past the end.
    let url = s.url(&format!("/org/m/resolve/{sha}/model.zt"));
    let whole = curl(&[], &url);
    assert_eq!(whole.body, bytes);
    let part = curl(&["-H", "Range: bytes=100-199"], &url);
    assert_eq!((part.status, &part.body[..]), (206, &bytes[100..200]));
    let rest = curl(&["-H", "Range: bytes=1000000-"], &url);
    assert_eq!((rest.status, &rest.body[..]), (206, &bytes[1_000_000..]));
    let past = curl(&["-H", &format!("Range: bytes={}-", bytes.len())], &url);
    assert_eq!(past.status, 416);

    // A cache revalidates by ETag.
    let etag = whole.header("etag").unwrap().to_owned();
    let again = curl(&["-H", &format!("If-None-Match: {etag}")], &url);
    assert_eq!((again.status, again.body.len()), (304, 0));

    // A small plain file: no LFS headers, its bytes as they are.
    let config = curl(&["-L"], &s.url("/org/m/resolve/main/config.json"));
    assert_eq!(config.body, br#"{"model_type":"bert"}"#);
    assert_eq!(config.header("x-linked-etag"), None);
    assert_eq!(config.header("x-repo-commit"), Some(sha.as_str()));
}

/// A download resumed by the `main` URL (`Range: bytes=N-`, no
/// `If-Range`: `HfFileSystem`'s streaming reads resume so, and append
/// what comes back without looking at its status) is led to the current
/// commit's URL and gets the rest of the file, or `416` at its end.
#[test]
fn a_download_resumed_by_main_gets_the_rest_of_the_file() {
    let root = repo_root();
    let s = Server::start(root.path(), &[]);
    let bytes = std::fs::read(root.path().join("org/m/model.zt")).unwrap();
    let main = s.url("/org/m/resolve/main/model.zt");
    let r = curl(&["-H", "Range: bytes=1000000-"], &main);
    assert_eq!(r.status, 302);
    let r = curl(&["-L", "-H", "Range: bytes=1000000-"], &main);
    assert_eq!((r.status, &r.body[..]), (206, &bytes[1_000_000..]));
    let end = format!("Range: bytes={}-", bytes.len());
    assert_eq!(curl(&["-L", "-H", &end], &main).status, 416);
}

/// A repository of 50,000 files: its information (`siblings`, with
/// sizes and blob ids) is written as it is reached, so asking for it
/// grows the daemon's peak memory by at most about the answer's size
/// (4.6 MB of JSON here), not by a JSON value per file (before: 69 MiB
/// more).
#[test]
fn a_large_repositorys_information_costs_about_its_answer() {
    let root = tempfile::tempdir().unwrap();
    let m = root.path().join("org/many");
    for i in 0..50_000 {
        let dir = m.join(format!("d{:02}", i % 100));
        if i < 100 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("f{i:05}.json")), b"{}").unwrap();
    }
    // No rescan of the 50,000 files (a second listing beside the first)
    // while the peak is watched.
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config_file(
        dir.path(),
        "[catalog]\nwatch = false\nrescan_interval_secs = 3600\n",
    );
    let s = Server::start(root.path(), &["--config", &cfg]);
    // The repository listed (and the daemon's own pools warmed) first.
    let refs = curl(&[], &s.url("/api/models/org/many/refs"));
    assert_eq!(refs.status, 200);
    let before = common::peak_rss_kib(&s);
    let r = curl(&[], &s.url("/api/models/org/many?blobs=true"));
    let grew = common::peak_rss_kib(&s).saturating_sub(before);
    assert_eq!(r.status, 200);
    eprintln!(
        "peak RSS grew {grew} KiB for {} bytes of JSON",
        r.body.len()
    );
    assert!(grew < 24 * 1024, "peak RSS grew {grew} KiB");
    // The Hub's keys, each once, and a file's size and blob id only
    // when asked for.
    let info = json(&r);
    let siblings = info["siblings"].as_array().unwrap();
    assert_eq!(siblings.len(), 50_000);
    let first = siblings[0].as_object().unwrap();
    let keys: Vec<&str> = first.keys().map(String::as_str).collect();
    assert_eq!(keys, ["blobId", "rfilename", "size"]);
    assert_eq!(first["rfilename"], "d00/f00000.json");
    assert_eq!(first["size"], 2);
    assert!(is_oid(first["blobId"].as_str().unwrap()), "{first:?}");
    let keys: Vec<&str> = info
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let all = [
        "_id",
        "author",
        "createdAt",
        "disabled",
        "downloads",
        "gated",
        "id",
        "lastModified",
        "likes",
        "modelId",
        "private",
        "sha",
        "siblings",
        "tags",
        "usedStorage",
    ];
    assert_eq!(keys, all);
    assert_eq!(info["author"], "org");
    assert_eq!(info["modelId"], "org/many");
    assert_eq!(info["usedStorage"], 100_000);
    let plain = json(&curl(&[], &s.url("/api/models/org/many")));
    let only_name = serde_json::json!({ "rfilename": "d00/f00000.json" });
    assert_eq!(plain["siblings"][0], only_name);
}

#[test]
fn a_corrupt_component_is_refused_before_any_of_its_bytes() {
    let root = repo_root();
    let model = root.path().join("org/m/model.zt");
    // Corrupt layer 1's bytes (its digest no longer holds).
    let s = Server::start(root.path(), &[]);
    let manifest = json(&curl(&[], &s.url("/v1/files/org/m/model.zt/manifest")));
    let offset = manifest["objects"]["model.layers.1.w"]["components"]["data"]["offset"]
        .as_u64()
        .unwrap();
    drop(s);
    let mut bytes = std::fs::read(&model).unwrap();
    bytes[offset as usize + 10] ^= 0xff;
    std::fs::write(&model, &bytes).unwrap();
    let s = Server::start(root.path(), &[]);
    // A range inside the corrupt component: a clean refusal naming it.
    let r = curl(
        &[
            "-L",
            "-H",
            &format!("Range: bytes={}-{}", offset, offset + 99),
        ],
        &s.url("/org/m/resolve/main/model.zt"),
    );
    assert_eq!(r.status, 409, "{}", String::from_utf8_lossy(&r.body));
    let why = r.header("x-error-message").unwrap();
    assert!(
        why.contains("model.zt") && why.contains("model.layers.1.w"),
        "{why}"
    );
    // The whole file: cut before the corrupt component's bytes.
    let whole = curl(&["-L"], &s.url("/org/m/resolve/main/model.zt"));
    assert!(whole.body.len() <= offset as usize, "{}", whole.body.len());
}

#[test]
fn a_file_changed_under_the_listing_makes_a_new_commit() {
    let root = repo_root();
    let dir = tempfile::tempdir().unwrap();
    // No file events and no rescans: the request finds the change.
    let cfg = common::config_file(
        dir.path(),
        "[catalog]\nwatch = false\nrescan_interval_secs = 3600\n",
    );
    let s = Server::start(root.path(), &["--config", &cfg]);
    let url = s.url("/org/m/resolve/main/config.json");
    let before = curl(&["-L"], &url);
    let commit = before.header("x-repo-commit").unwrap().to_owned();
    std::fs::write(
        root.path().join("org/m/config.json"),
        br#"{"model_type":"gpt2"}"#,
    )
    .unwrap();
    // A download resumed at the old commit's URL (where `main` led) fails
    // by name instead of completing with the new version's bytes; `main`
    // leads to the new commit.
    let pinned = format!("/org/m/resolve/{commit}/config.json");
    let old = curl(&["-H", "Range: bytes=5-"], &s.url(&pinned));
    assert_eq!(old.status, 404);
    assert_eq!(old.header("x-error-code"), Some("RevisionNotFound"));
    let after = curl(&["-L"], &url);
    assert_eq!(after.status, 200);
    assert_eq!(after.body, br#"{"model_type":"gpt2"}"#);
    let now = after.header("x-repo-commit").unwrap();
    assert_ne!(now, commit);
    assert_ne!(after.header("etag"), before.header("etag"));
    let info = json(&curl(&[], &s.url("/api/models/org/m")));
    assert_eq!(info["sha"], now);
}

#[test]
fn a_large_tree_is_listed_in_pages_by_absolute_links() {
    let root = tempfile::tempdir().unwrap();
    let m = root.path().join("org/many");
    for d in 0..3 {
        let sub = m.join(format!("d{d}"));
        std::fs::create_dir_all(&sub).unwrap();
        for i in 0..900 {
            std::fs::write(sub.join(format!("f{i:04}.txt")), i.to_string()).unwrap();
        }
    }
    let s = Server::start(root.path(), &[]);
    let mut url = s.url("/api/models/org/many/tree/main?recursive=true");
    let (mut paths, mut pages) = (Vec::new(), 0);
    loop {
        let r = curl(&[], &url);
        assert_eq!(r.status, 200);
        pages += 1;
        for e in json(&r).as_array().unwrap() {
            paths.push(e["path"].as_str().unwrap().to_owned());
        }
        let Some(link) = r.header("link") else { break };
        let next = link
            .strip_prefix('<')
            .and_then(|l| l.split_once(">; rel=\"next\""))
            .unwrap()
            .0;
        assert!(next.starts_with(&format!("http://{}/", s.addr)), "{next}");
        url = next.to_owned();
    }
    // 2,700 files and 3 folders, each once, in order.
    assert_eq!(paths.len(), 2703);
    assert_eq!(pages, 3);
    let mut sorted = paths.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, paths);
    // One folder, not recursive.
    let one = json(&curl(&[], &s.url("/api/models/org/many/tree/main/d1")));
    assert_eq!(one.as_array().unwrap().len(), 900);
    // Behind a TLS proxy, the links are the proxy's.
    let proxied = curl(
        &[
            "-H",
            "X-Forwarded-Proto: https",
            "-H",
            "X-Forwarded-Host: hub.example:8443",
        ],
        &s.url("/api/models/org/many/tree/main?recursive=true"),
    );
    let link = proxied.header("link").unwrap();
    assert!(
        link.starts_with("<https://hub.example:8443/api/models/org/many/tree/"),
        "{link}"
    );
    // A shared cache must not hand those links to another client.
    let vary: Vec<&str> = proxied
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("vary"))
        .map(|(_, v)| v.as_str())
        .collect();
    let vary = vary.join(", ");
    assert!(
        [
            "X-Forwarded-Host",
            "X-Forwarded-Proto",
            "X-Forwarded-Prefix"
        ]
        .iter()
        .all(|h| vary.contains(h)),
        "{vary:?}"
    );
    // Under a proxy's path, the links keep it; a prefix that is no plain
    // path is ignored.
    for (prefix, base) in [
        ("/mirror/hf/", "<http://hub.example/mirror/hf/api/"),
        ("/a/../b", "<http://hub.example/api/"),
        ("/x\"y", "<http://hub.example/api/"),
        ("nope", "<http://hub.example/api/"),
    ] {
        let proxied = curl(
            &[
                "-H",
                "X-Forwarded-Host: hub.example",
                "-H",
                &format!("X-Forwarded-Prefix: {prefix}"),
            ],
            &s.url("/api/models/org/many/tree/main?recursive=true"),
        );
        let link = proxied.header("link").unwrap();
        assert!(link.starts_with(base), "{prefix:?}: {link}");
    }
}

#[test]
fn the_daemons_own_files_are_never_a_repositorys_files() {
    let root = repo_root();
    let m = root.path().join("org/m");
    let state = m.join("state");
    // Its token file under the root too, through a symlink.
    std::fs::write(m.join("tokens.real"), b"t0ken\n").unwrap();
    std::os::unix::fs::symlink(m.join("tokens.real"), root.path().join("tokens")).unwrap();
    // With QUIC on, the state directory holds its certificate and key.
    let s = Server::start_quic(
        root.path(),
        &[
            "--state-dir",
            state.to_str().unwrap(),
            "--token-file",
            root.path().join("tokens").to_str().unwrap(),
        ],
    );
    assert!(walk(&state) > 0);
    let auth = ["-H", "Authorization: Bearer t0ken"];
    // A file added since: once a rescan lists it, it has seen the state
    // directory's files too.
    std::fs::write(m.join("added.txt"), b"added").unwrap();
    let mut names = Vec::new();
    assert!(common::eventually(Duration::from_secs(10), || {
        let info = json(&curl(&auth, &s.url("/api/models/org/m")));
        names = info["siblings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["rfilename"].as_str().unwrap().to_owned())
            .collect();
        names.iter().any(|n| n == "added.txt")
    }));
    assert_eq!(names, ["README.md", "added.txt", "config.json", "model.zt"]);
    for path in ["tokens.real", "state/quic-key.pem"] {
        let r = curl(&auth, &s.url(&format!("/org/m/resolve/main/{path}")));
        assert_eq!(r.header("x-error-code"), Some("EntryNotFound"), "{path}");
    }
}

fn walk(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| match e.file_type().map(|t| t.is_dir()) {
                    Ok(true) => walk(&e.path()),
                    _ => 1,
                })
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn no_hub_turns_it_off() {
    let root = repo_root();
    let s = Server::start(root.path(), &["--no-hub"]);
    for path in ["/org/m/resolve/main/config.json", "/api/models/org/m"] {
        let r = curl(&[], &s.url(path));
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.header("x-error-code"), None, "{path}");
    }
    // The model file itself is served as before.
    assert_eq!(curl(&["-I"], &s.url("/org/m/model.zt")).status, 200);
}

#[test]
fn llama_cpp_finds_a_repositorys_files_by_its_refs_and_tree() {
    // llama.cpp's `-hf ORG/NAME` (common/hf-cache.cpp, download.cpp): the
    // refs for `main`'s commit, the first page of the recursive tree at
    // that commit (files with 40- or 64-hex oids, others skipped), then
    // a HEAD (ETag, Content-Length, Accept-Ranges) and a GET of each,
    // resumed with a Range that must answer 206.
    let root = repo_root();
    let s = Server::start(root.path(), &[]);
    let refs = json(&curl(&[], &s.url("/api/models/org/m/refs")));
    let main = &refs["branches"][0];
    assert_eq!(main["name"], "main");
    let commit = main["targetCommit"].as_str().unwrap();
    assert!(is_oid(commit));
    let tree = json(&curl(
        &[],
        &s.url(&format!("/api/models/org/m/tree/{commit}?recursive=true")),
    ));
    let files: Vec<(&str, &str)> = tree
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "file")
        .map(|e| (e["path"].as_str().unwrap(), e["oid"].as_str().unwrap()))
        .collect();
    assert_eq!(files.len(), 3);
    for (path, oid) in files {
        assert!(is_oid(oid), "{path}: {oid}");
        let url = s.url(&format!("/org/m/resolve/{commit}/{path}"));
        let head = curl(&["-I"], &url);
        assert_eq!(head.header("etag"), Some(format!("\"{oid}\"").as_str()));
        assert_eq!(head.header("accept-ranges"), Some("bytes"));
        let size: usize = head.header("content-length").unwrap().parse().unwrap();
        let local = std::fs::read(root.path().join("org/m").join(path)).unwrap();
        assert_eq!(size, local.len());
        let resumed = curl(&["-H", "Range: bytes=2-"], &url);
        assert_eq!((resumed.status, &resumed.body[..]), (206, &local[2..]));
    }
}

#[test]
fn symlinked_folders_are_repositories_under_their_own_names() {
    let root = repo_root();
    let org = root.path().join("org");
    // An alias of a repository, a loop, and a link into a dot-folder.
    std::os::unix::fs::symlink(org.join("m"), org.join("alias")).unwrap();
    std::os::unix::fs::symlink(&org, org.join("m/loop")).unwrap();
    std::fs::create_dir_all(root.path().join(".hidden/x")).unwrap();
    std::fs::write(root.path().join(".hidden/x/secret.json"), b"{}").unwrap();
    std::os::unix::fs::symlink(root.path().join(".hidden/x"), org.join("dot")).unwrap();
    // A name no Hub URL can carry is not listed (a snapshot would fail).
    std::fs::write(org.join("m").join("back\\slash.txt"), b"x").unwrap();
    let s = Server::start(root.path(), &[]);
    let siblings = |id: &str| -> Vec<String> {
        let r = curl(&[], &s.url(&format!("/api/models/{id}")));
        json(&r)["siblings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["rfilename"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(siblings("org/m"), ["README.md", "config.json", "model.zt"]);
    assert_eq!(siblings("org/alias"), siblings("org/m"));
    // The link into a dot-folder is left out as the dot-folder is (a
    // repository's symlink must not serve what the root hides, such as
    // another repository's `.git/config`).
    for id in ["org/dot", ".hidden/x"] {
        let r = curl(&[], &s.url(&format!("/api/models/{id}")));
        assert_eq!(r.header("x-error-code"), Some("RepoNotFound"), "{id}");
    }
    let r = curl(&[], &s.url("/org/dot/resolve/main/secret.json"));
    assert_eq!(r.header("x-error-code"), Some("RepoNotFound"));
    let alias = curl(&["-L"], &s.url("/org/alias/resolve/main/config.json"));
    assert_eq!(alias.body, br#"{"model_type":"bert"}"#);
}

#[test]
fn paths_info_answers_what_exists_within_its_bounds() {
    let root = repo_root();
    let s = Server::start(root.path(), &[]);
    let dir = tempfile::tempdir().unwrap();
    let form = dir.path().join("form");
    let post = |body: &str| {
        std::fs::write(&form, body).unwrap();
        curl(
            &["--data-binary", &format!("@{}", form.display())],
            &s.url("/api/models/org/m/paths-info/main"),
        )
    };
    // Files, a folder... of the repository only, each once.
    std::fs::create_dir_all(root.path().join("org/m/sub")).unwrap();
    std::fs::write(root.path().join("org/m/sub/a.txt"), b"a").unwrap();
    let listed = common::eventually(Duration::from_secs(10), || {
        json(&post("paths=sub"))
            .as_array()
            .is_some_and(|a| a.len() == 1)
    });
    assert!(listed);
    let got = json(&post(
        "paths=config.json&paths=config.json&paths=sub&paths=..%2Fm%2Fconfig.json&paths=nope",
    ));
    let entries: Vec<(&str, &str)> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["type"].as_str().unwrap(), e["path"].as_str().unwrap()))
        .collect();
    assert_eq!(entries, [("file", "config.json"), ("directory", "sub")]);
    // Past 10,000 paths at once: refused by name, before any lookup.
    let many = vec!["paths=x"; 10_001].join("&");
    let r = post(&many);
    assert_eq!(r.status, 413, "{}", String::from_utf8_lossy(&r.body));
    // At the cap, answered; other pairs, however many, are not paths.
    let r = post(&vec!["paths=x"; 10_000].join("&"));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let others = format!("{}paths=config.json", "a=&".repeat(20_000));
    let entries = json(&post(&others));
    assert_eq!(entries.as_array().map(Vec::len), Some(1), "{entries}");
}

#[test]
fn a_file_whose_xet_index_would_not_fit_goes_out_over_plain_http() {
    let root = tempfile::tempdir().unwrap();
    let m = root.path().join("org/big");
    std::fs::create_dir_all(&m).unwrap();
    // 16 MiB that cut as files usually do: about 10 KiB of index.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let bytes: Vec<u8> = (0..16 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(m.join("weights.bin"), &bytes).unwrap();
    let head = |budget: Option<u64>| {
        let dir = tempfile::tempdir().unwrap();
        let mut hub = "xet_wait_ms = 30000\n".to_owned();
        if let Some(b) = budget {
            hub.push_str(&format!("xet_index_bytes = {b}\n"));
        }
        let cfg = common::config_file(dir.path(), &format!("[hub]\n{hub}"));
        let s = Server::start(root.path(), &["--config", &cfg]);
        let url = s.url("/org/big/resolve/main/weights.bin");
        let r = curl(&["-I", "-L"], &url);
        let got = curl(&["-L"], &url);
        assert!(got.body == bytes, "the file, whole");
        r.header("x-xet-hash").map(str::to_owned)
    };
    assert!(head(None).is_some(), "indexed within the default budget");
    // Half of 8 KiB for one index: not even started.
    assert_eq!(head(Some(8192)), None, "plain HTTP");
}
