//! `zt fetch` over both transports against the real daemon: whole files,
//! selections, corruption, and an interrupted fetch resumed from its journal.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::fetch::{big_model, fault_mid_fetch, same_objects, wait_bounded, zt};
use common::{sample_root, Server};
use zt_format::{ReadOptions, ZtFile};

/// The file over ztp/1, over HTTP at the API's path, and over HTTP at
/// the plain path a QUIC URL reads like (`http://HOST:PORT/FILE`).
fn urls(s: &Server, file: &str) -> [(String, Vec<String>); 3] {
    let (q, fp) = s.quic.clone().unwrap();
    [
        (
            format!("quic://{q}/{file}"),
            vec!["--cert-fingerprint".into(), fp],
        ),
        (s.url(&format!("/v1/files/{file}")), vec![]),
        (s.url(&format!("/{file}")), vec![]),
    ]
}

#[test]
fn whole_files_and_selections_over_both_transports() {
    let root = sample_root();
    let s = Server::start_quic(root.path(), &[]);
    let dir = tempfile::tempdir().unwrap();
    let original = root.path().join("sample.zt");
    for (i, (url, extra)) in urls(&s, "sample.zt").iter().enumerate() {
        let out = dir.path().join(format!("whole{i}.zt"));
        let mut args = vec!["fetch", url.as_str(), "-o", out.to_str().unwrap()];
        args.extend(extra.iter().map(String::as_str));
        let r = zt(&args);
        assert!(
            r.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert!(zt(&["verify", "--require-digest", out.to_str().unwrap()])
            .status
            .success());
        assert_eq!(ZtFile::open(&out).unwrap().manifest().objects.len(), 39);
        same_objects(&original, &out, None);

        let sel = dir.path().join(format!("sel{i}.zt"));
        let mut args = vec![
            "fetch",
            url.as_str(),
            "-o",
            sel.to_str().unwrap(),
            "--select",
            "model.layers.2.*",
        ];
        args.extend(extra.iter().map(String::as_str));
        assert!(zt(&args).status.success());
        assert!(zt(&["verify", sel.to_str().unwrap()]).status.success());
        assert_eq!(ZtFile::open(&sel).unwrap().manifest().objects.len(), 9);
        same_objects(&original, &sel, Some("model.layers.2."));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".part"))
            .collect();
        assert!(leftovers.is_empty());
        // A pattern no server takes is the user's mistake over either
        // transport (over ztp/1 it was the server's `no_match`, exit 1).
        let bad = dir.path().join("bad.zt");
        let mut args = vec!["fetch", url.as_str(), "-o", bad.to_str().unwrap()];
        args.extend(["--select", "\\"]);
        args.extend(extra.iter().map(String::as_str));
        let r = zt(&args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{url}: {err}");
        assert!(err.contains("unpaired backslash"), "{url}: {err}");
    }
    // Remote info over both transports and both HTTP paths.
    for (url, extra) in urls(&s, "sample.zt") {
        let mut args = vec!["info", url.as_str(), "--json"];
        args.extend(extra.iter().map(String::as_str));
        let r = zt(&args);
        let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        assert_eq!(v["objects"].as_object().unwrap().len(), 39, "{url}");
    }
    // A missing path is a clear error naming it, with the network exit code... or not found.
    let r = zt(&[
        "fetch",
        &s.url("/v1/files/none.zt"),
        "-o",
        dir.path().join("n.zt").to_str().unwrap(),
    ]);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("404"));
}

/// Issue 29, item 5: `zt` closes a ztp/1 connection without waiting out
/// its draining period, yet the close reaches the daemon before the
/// process exits: after each of 5 `zt info quic://`, the daemon holds no
/// connection within 2 s (a lost close would hold it for the 60 s idle
/// timeout).
#[test]
fn a_short_quic_command_closes_its_connection_before_it_exits() {
    let root = sample_root();
    let s = Server::start_quic(root.path(), &[]);
    let (q, fp) = s.quic.clone().unwrap();
    let url = format!("quic://{q}/sample.zt");
    for _ in 0..5 {
        let r = zt(&["info", &url, "--cert-fingerprint", &fp]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let closed = common::eventually(Duration::from_secs(2), || {
            common::quic::metric(&s, "ztserve_quic_connections") == 0
        });
        assert!(
            closed,
            "the daemon still holds the connection of an exited zt"
        );
    }
}

#[test]
fn corruption_is_named_and_leaves_no_output() {
    let root = sample_root();
    let path = root.path().join("sample.zt");
    let f = ZtFile::open_with(&path, ReadOptions::default()).unwrap();
    let c = f
        .object("model.layers.1.mlp.up_proj.weight")
        .unwrap()
        .components["data"]
        .clone();
    drop(f);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[c.offset as usize + 100] ^= 0x5a;
    std::fs::write(&path, &bytes).unwrap();
    let s = Server::start_quic(root.path(), &[]);
    let dir = tempfile::tempdir().unwrap();
    for (i, (url, extra)) in urls(&s, "sample.zt").iter().enumerate() {
        let out = dir.path().join(format!("c{i}.zt"));
        let mut args = vec!["fetch", url.as_str(), "-o", out.to_str().unwrap()];
        args.extend(extra.iter().map(String::as_str));
        let r = zt(&args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{url}: {err}");
        assert!(
            err.contains("object \"model.layers.1.mlp.up_proj.weight\", component \"data\"")
                && err.contains("digest mismatch"),
            "{err}"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "no output, no partial file: {left:?}");
    }
}

/// A daemon serving the sample model, its URL, and the file's ETag.
fn sample_served() -> (tempfile::TempDir, Server, String, String) {
    let root = sample_root();
    let s = Server::start(root.path(), &[]);
    let url = s.url("/sample.zt");
    let etag = common::curl(&["-I"], &url)
        .header("etag")
        .unwrap()
        .to_owned();
    (root, s, url, etag)
}

/// Writes at `journal` a journal of a fetch of the whole file at `etag`
/// that vouches for nothing yet: its partial file is opened to go on,
/// not removed.
fn fresh_journal(journal: &Path, etag: &str) {
    let header = serde_json::json!({ "copy": false, "etag": etag, "layout": 2, "select": [] });
    std::fs::write(journal, format!("{header}\n")).unwrap();
}

/// Links planted where `zt fetch` keeps its partial file and journal (a
/// folder others may write), symbolic or hard, are not written through:
/// the files they lead to stay as they were. A linked partial file beside
/// a journal of this fetch, or a linked journal, fails the fetch, naming
/// the link.
#[test]
fn links_planted_for_the_partial_file_and_journal_are_not_followed() {
    let (_root, _s, url, etag) = sample_served();
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"the user's own file").unwrap();
    let mut i = 0;
    for hard in [false, true] {
        for planted in [".part", ".part.journal"] {
            i += 1;
            let out = dir.path().join(format!("out{i}.zt"));
            let link = dir.path().join(format!("out{i}.zt{planted}"));
            if hard {
                std::fs::hard_link(&victim, &link).unwrap();
            } else {
                std::os::unix::fs::symlink(&victim, &link).unwrap();
            }
            if planted == ".part" {
                fresh_journal(&dir.path().join(format!("out{i}.zt.part.journal")), &etag);
            }
            let r = zt(&["fetch", &url, "-o", out.to_str().unwrap()]);
            let err = String::from_utf8_lossy(&r.stderr);
            let kind = if hard { "hard link" } else { "link" };
            let now = std::fs::read(&victim).unwrap();
            assert!(
                now == b"the user's own file",
                "{planted}: written through the {kind} ({} bytes there now)",
                now.len()
            );
            assert!(
                !r.status.success(),
                "{planted}: the fetch went through the {kind}"
            );
            assert!(err.contains(&format!("out{i}.zt{planted}")), "{err}");
            assert!(!out.exists());
            // A hard link's other name stays the victim's.
            let _ = std::fs::remove_file(&link);
        }
    }
}

/// `zt fetch URL -o OUT`, killed (and failed) past a minute.
fn fetch_bounded(url: &str, out: &Path) -> Output {
    let child = std::process::Command::new(common::zt_bin())
        .args(["fetch", url, "-o", out.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_bounded(child, Duration::from_secs(60))
}

/// What is planted where a fetch's partial file or journal goes, other
/// than a link: a FIFO (opened, it would block the fetch forever) and, run
/// as root, another user's regular file (a partial file is renamed into
/// place once verified: another user's would stay theirs to change). The
/// fetch fails naming the file, without hanging, and leaves no output;
/// a partial file of the user's beside a planted journal is left as it
/// was (the journal is opened first). Files of the folder's own owner
/// (who may replace anything there, as on a filesystem that gives every
/// file one owner) are the fetch's to go on with.
#[test]
fn fifos_and_other_users_files_are_not_taken_for_the_fetchs_own() {
    let (_root, _s, url, etag) = sample_served();
    let dir = tempfile::tempdir().unwrap();
    let as_root = {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(dir.path()).unwrap().uid() == 0
    };
    let mut kinds = vec!["fifo"];
    if as_root {
        kinds.push("another user's");
    } else {
        eprintln!("not root: another user's files are not planted");
    }
    let theirs = |path: &Path| std::os::unix::fs::chown(path, Some(65534), Some(65534)).unwrap();
    let mut i = 0;
    for kind in kinds {
        for planted in [".part", ".part.journal"] {
            i += 1;
            let out = dir.path().join(format!("out{i}.zt"));
            let at = dir.path().join(format!("out{i}.zt{planted}"));
            let part = dir.path().join(format!("out{i}.zt.part"));
            if planted == ".part" {
                fresh_journal(&dir.path().join(format!("out{i}.zt.part.journal")), &etag);
            } else {
                std::fs::write(&part, b"the user's partial file").unwrap();
            }
            if kind == "fifo" {
                mkfifo(&at);
            } else {
                std::fs::write(&at, b"").unwrap();
                theirs(&at);
            }
            let r = fetch_bounded(&url, &out);
            let err = String::from_utf8_lossy(&r.stderr);
            assert!(!r.status.success(), "{kind} {planted}: the fetch took it");
            assert!(
                err.contains(&format!("out{i}.zt{planted}")),
                "{kind} {planted}: {err}"
            );
            assert!(!out.exists(), "{kind} {planted}: an output");
            if planted == ".part.journal" {
                assert_eq!(
                    std::fs::read(&part).unwrap(),
                    b"the user's partial file",
                    "{kind}: the user's partial file was touched"
                );
            }
        }
    }
    if as_root {
        // A folder of that user's, with their partial file and journal.
        let folder = dir.path().join("theirs");
        std::fs::create_dir(&folder).unwrap();
        let out = folder.join("out.zt");
        let journal = folder.join("out.zt.part.journal");
        fresh_journal(&journal, &etag);
        std::fs::write(folder.join("out.zt.part"), b"").unwrap();
        for path in [&folder, &journal, &folder.join("out.zt.part")] {
            theirs(path);
        }
        let r = fetch_bounded(&url, &out);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(r.status.success(), "the folder owner's: {err}");
        assert!(out.exists());
    }
    // A partial file that cannot be opened (a folder, which a fetch
    // without a journal does not remove as it would a stale file), where
    // no journal was: the journal the fetch made is not left behind, empty.
    let out = dir.path().join("alone.zt");
    std::fs::create_dir(dir.path().join("alone.zt.part")).unwrap();
    let r = fetch_bounded(&url, &out);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "the fetch took a folder");
    assert!(
        err.contains("alone.zt.part:"),
        "the partial file named: {err}"
    );
    let journal = dir.path().join("alone.zt.part.journal");
    assert!(!journal.exists(), "an empty journal was left behind");
}

/// A second fetch into an output while the first still runs (its journal
/// locked: here, by this test) fails at once, naming the journal, and
/// leaves the first one's partial file and journal as they were; once the
/// first is over, the same command fetches.
#[test]
fn a_second_fetch_into_the_same_output_is_refused_while_the_first_runs() {
    let (_root, _s, url, etag) = sample_served();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.zt");
    let (part, journal) = (
        dir.path().join("out.zt.part"),
        dir.path().join("out.zt.part.journal"),
    );
    fresh_journal(&journal, &etag);
    let first = std::fs::read(&journal).unwrap();
    std::fs::write(&part, b"the first fetch's partial file").unwrap();
    let held = std::fs::File::open(&journal).unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let r = fetch_bounded(&url, &out);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "the second fetch ran: {err}");
    assert!(err.contains("out.zt.part.journal"), "{err}");
    assert!(err.contains("another fetch"), "{err}");
    assert!(!out.exists(), "an output");
    assert_eq!(
        std::fs::read(&part).unwrap(),
        b"the first fetch's partial file"
    );
    assert_eq!(std::fs::read(&journal).unwrap(), first, "the journal");
    drop(held);
    let r = fetch_bounded(&url, &out);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(!journal.exists() && !part.exists());
}

fn mkfifo(at: &Path) {
    let made = std::process::Command::new("mkfifo").arg(at).status();
    assert!(made.unwrap().success(), "mkfifo {}", at.display());
}

/// A file of more objects than one request may name (the cap on
/// patterns, 4096) is fetched whole over both transports, and resumed
/// when more than that are still missing: the fetch asked for every
/// object by name, which the cap refused (HTTP) or the server's frame
/// limit did (ztp/1), so such a file could not be fetched at all.
#[test]
fn a_file_of_more_objects_than_a_request_may_name_is_fetched_and_resumed() {
    const OBJECTS: usize = zt_format::select::MAX_PATTERNS + 904;
    let root = tempfile::tempdir().unwrap();
    let original = root.path().join("wide.zt");
    let mut w = zt_format::Writer::new(Vec::new(), "wide.zt").unwrap();
    let crc = zt_format::StoreOptions {
        digest: Some(zt_format::DigestAlgorithm::Crc32c),
        ..zt_format::StoreOptions::default()
    };
    for i in 0..OBJECTS {
        let data = (i as u32).to_le_bytes();
        // Names as long as a large checkpoint's: pieces of a request by
        // name are cut by their bytes too (a ztp/1 request is one
        // message of at most 64 KiB).
        let name = format!("model.layers.{i:05}.mlp.experts.17.down_proj.weight");
        w.add_dense(&name, &[4], zt_format::DType::U8, &data, crc)
            .unwrap();
    }
    std::fs::write(&original, w.finish().unwrap()).unwrap();
    let s = Server::start_quic(root.path(), &[]);
    let etag = common::curl(&["-I"], &s.url("/wide.zt"))
        .header("etag")
        .unwrap()
        .to_owned();
    let dir = tempfile::tempdir().unwrap();
    let fetched = |url: &str, extra: &[String], out: &Path| {
        let mut args = vec!["fetch", url, "-o", out.to_str().unwrap()];
        args.extend(extra.iter().map(String::as_str));
        let r = zt(&args);
        let err = String::from_utf8_lossy(&r.stderr).into_owned();
        assert!(r.status.success(), "{url}: {err}");
        assert_eq!(ZtFile::open(out).unwrap().manifest().objects.len(), OBJECTS);
        same_objects(&original, out, None);
        err
    };
    for (i, (url, extra)) in urls(&s, "wide.zt").iter().enumerate() {
        let out = dir.path().join(format!("whole{i}.zt"));
        fetched(url, extra, &out);
        // The finished file as the partial file of another fetch, its
        // journal vouching for one object: the rest, over the cap, is
        // asked for in pieces.
        let again = dir.path().join(format!("again{i}.zt"));
        std::fs::copy(&out, dir.path().join(format!("again{i}.zt.part"))).unwrap();
        let journal = dir.path().join(format!("again{i}.zt.part.journal"));
        fresh_journal(&journal, &etag);
        let mut lines = std::fs::read_to_string(&journal).unwrap();
        lines.push_str("model.layers.00000.mlp.experts.17.down_proj.weight\tdata\n");
        std::fs::write(&journal, lines).unwrap();
        let err = fetched(url, extra, &again);
        assert!(err.contains("resumed from the journal"), "{url}: {err}");
        // Through a cache that holds ten of the objects: the rest, over
        // the cap, asked for in pieces.
        let cache = dir.path().join(format!("cache{i}"));
        let mut cached = extra.clone();
        cached.extend(["--cache-dir".to_owned(), cache.display().to_string()]);
        let ten = dir.path().join(format!("ten{i}.zt"));
        let mut args = vec![
            "fetch",
            url,
            "-o",
            ten.to_str().unwrap(),
            "--select",
            "model.layers.0000?.*",
        ];
        args.extend(cached.iter().map(String::as_str));
        let r = zt(&args);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        fetched(url, &cached, &dir.path().join(format!("cached{i}.zt")));
        // A selection of the user's own too long for one request (1,500
        // names, 81 KB): applied to the whole manifest by the client, its
        // objects asked for by name in pieces.
        let mine = dir.path().join(format!("mine{i}.zt"));
        let mut args = vec!["fetch".to_owned(), url.clone(), "-o".to_owned()];
        args.push(mine.display().to_string());
        for n in (0..OBJECTS).step_by(3).take(1_500) {
            args.push("--select".to_owned());
            args.push(format!(
                "model.layers.{n:05}.mlp.experts.17.down_proj.weight"
            ));
        }
        args.extend(extra.iter().cloned());
        let r = zt(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(
            r.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        let got = ZtFile::open(&mine).unwrap();
        assert_eq!(got.manifest().objects.len(), 1_500, "{url}");
        assert!(got
            .manifest()
            .objects
            .contains_key("model.layers.04497.mlp.experts.17.down_proj.weight"));
    }
}

/// Starts `zt fetch`, waits until the journal lists a few components, and
/// kills the server (SIGKILL: no goodbye on either transport).
fn kill_server_mid_fetch(url: &str, out: &Path, args: &[&str], server: Server) -> Output {
    fault_mid_fetch(url, out, args, || drop(server))
}

/// The fetch failed as a transport error, left its part file and journal,
/// and nothing that looks complete.
fn assert_interrupted(r: &Output, out: &Path) {
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(4), "{err}");
    assert!(!out.exists(), "no output that looks complete");
    assert!(out.with_file_name("big.zt.part").exists());
    assert!(out.with_file_name("big.zt.part.journal").exists());
}

/// Components of 1 MiB or more start on a page boundary in a fetched file
/// (direct I/O), the rest on the format's 64 bytes.
fn assert_page_aligned(out: &Path) {
    let f = ZtFile::open(out).unwrap();
    let mut large = 0;
    for obj in f.manifest().objects.values() {
        for c in obj.components.values() {
            let page = c.length >= zt_format::PAGE_ALIGNED_FROM as u64;
            let align = if page { 4096 } else { 64 };
            assert_eq!(c.offset % align, 0, "{c:?}");
            large += usize::from(page);
        }
    }
    assert!(large > 0, "the model has large components");
}

fn assert_resumed(r: &Output, big: &Path, out: &Path) {
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(err.contains("resumed from the journal"), "{err}");
    assert!(zt(&["verify", out.to_str().unwrap()]).status.success());
    same_objects(big, out, None);
    assert_page_aligned(out);
    assert!(!out.with_file_name("big.zt.part.journal").exists());
    assert!(!out.with_file_name("big.zt.part").exists());
}

#[test]
fn a_server_killed_mid_http_fetch_fails_cleanly_and_the_fetch_resumes() {
    let root = tempfile::tempdir().unwrap();
    let big = big_model(root.path());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.zt");

    // 20 MB/s through the relay: the 120 MiB fetch takes seconds, so the
    // kill lands mid-transfer every time.
    let s = Server::start(root.path(), &[]);
    let relay = common::relay::Relay::tcp(s.addr.parse().unwrap(), 20_000_000);
    let url = format!("http://{}/v1/files/big.zt", relay.addr);
    let r = kill_server_mid_fetch(&url, &out, &["--connections", "2"], s);
    assert_interrupted(&r, &out);

    let s = Server::start(root.path(), &[]);
    let r = zt(&[
        "fetch",
        &s.url("/v1/files/big.zt"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_resumed(&r, &big, &out);
}

#[test]
fn a_server_killed_mid_quic_fetch_fails_cleanly_and_the_fetch_resumes() {
    let root = tempfile::tempdir().unwrap();
    let big = big_model(root.path());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.zt");

    let s = Server::start_quic(root.path(), &[]);
    let (q, fp) = s.quic.clone().unwrap();
    let relay = common::relay::Relay::udp(q.parse().unwrap(), 20_000_000);
    let url = format!("quic://{}/big.zt", relay.addr);
    let started = Instant::now();
    let r = kill_server_mid_fetch(&url, &out, &["--cert-fingerprint", &fp], s);
    assert_interrupted(&r, &out);
    // A vanished server is noticed by the idle timeout, not never.
    assert!(started.elapsed() < Duration::from_secs(40));
    let err = String::from_utf8_lossy(&r.stderr);
    let lost = format!(
        "big.zt: the QUIC connection to {} was lost: timed out",
        relay.addr
    );
    assert!(err.contains(&lost), "{err}");
    assert!(err.contains(" of 120 components undelivered"), "{err}");

    let s = Server::start_quic(root.path(), &[]);
    let (q, fp) = s.quic.clone().unwrap();
    let r = zt(&[
        "fetch",
        &format!("quic://{q}/big.zt"),
        "--cert-fingerprint",
        &fp,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_resumed(&r, &big, &out);
}
