//! The client's local transport (`Client::open_local`): a path read as a
//! URL is, through the same client (what the Python package opens a local
//! file with): every component delivered verified in send order, zstd
//! components as stored, rows and byte ranges cut from the checked file,
//! and a corrupt component failed alone, naming itself.

use std::os::unix::fs::FileExt;

use zt_client::{Client, Error, Options, Verification};
use zt_format::rows::Rows;
use zt_format::{DType, DigestAlgorithm, StoreOptions, Writer};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `a`: u8 [16, 8] raw; `z`: u8 [4096] zstd. Returns their bytes.
fn write(path: &std::path::Path) -> (Vec<u8>, Vec<u8>) {
    let a: Vec<u8> = (0..128u32).map(|i| (i * 7 % 251) as u8).collect();
    let z: Vec<u8> = (0..4096u32).map(|i| (i % 13) as u8).collect();
    let mut w = Writer::new(Vec::new(), "m.zt").unwrap();
    let sha = StoreOptions {
        digest: Some(DigestAlgorithm::Sha256),
        ..StoreOptions::default()
    };
    w.add_dense("a", &[16, 8], DType::U8, &a, sha).unwrap();
    let zstd = StoreOptions {
        zstd_level: Some(3),
        ..sha
    };
    w.add_dense("z", &[4096], DType::U8, &z, zstd).unwrap();
    std::fs::write(path, w.finish().unwrap()).unwrap();
    (a, z)
}

#[test]
fn a_local_file_reads_as_a_remote_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.zt");
    let (a, z) = write(&path);
    let path = path.to_str().unwrap();
    rt().block_on(async {
        let c = Client::open_local(path, Options::default()).await.unwrap();
        assert!(c.is_local());
        let remote = c.manifest().await.unwrap();
        assert_eq!(remote.manifest.objects.len(), 2);
        assert_eq!(remote.size, std::fs::metadata(path).unwrap().len());

        let mut f = c.fetch(&[], Some(&remote.etag)).await.unwrap();
        let mut got = Vec::new();
        while let Some(d) = f.next().await {
            let d = d.unwrap();
            assert_eq!(d.verification, Verification::Verified);
            got.push((
                d.object.clone(),
                d.decoded(1 << 20).unwrap().as_slice().to_vec(),
            ));
        }
        got.sort();
        assert_eq!(got, vec![("a".to_owned(), a.clone()), ("z".to_owned(), z)]);

        let rows = c
            .read_rows(&remote, "a", Rows { start: 2, end: 5 })
            .await
            .unwrap();
        assert_eq!(rows.data.as_slice(), &a[16..40]);

        let data = remote.manifest.component("a", "data").unwrap();
        let range = data.offset..data.offset + 8;
        let bytes = c.read_ranges(&[range], &remote.etag).await.unwrap();
        assert_eq!(bytes, vec![a[..8].to_vec()]);

        let stale = c.fetch(&[], Some("\"another\"")).await.unwrap_err();
        assert!(matches!(stale, Error::Changed { .. }), "{stale}");
        let none = c.manifest_of(&["nothing.*".to_owned()]).await.unwrap_err();
        assert!(none.to_string().contains("nothing"), "{none}");
    });
}

#[test]
fn a_corrupt_local_component_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.zt");
    write(&path);
    let at = {
        let f = zt_format::ZtFile::open(&path).unwrap();
        f.manifest().component("a", "data").unwrap().offset
    };
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0xff], at).unwrap();
    drop(f);
    rt().block_on(async {
        let c = Client::open_local(path.to_str().unwrap(), Options::default())
            .await
            .unwrap();
        let mut f = c.fetch(&[], None).await.unwrap();
        let (mut ok, mut failed) = (Vec::new(), Vec::new());
        while let Some(d) = f.next().await {
            match d {
                Ok(d) => ok.push(d.object),
                Err(e) => failed.push(e.to_string()),
            }
        }
        assert_eq!(ok, vec!["z".to_owned()]);
        assert_eq!(failed.len(), 1);
        assert!(
            failed[0].contains("\"a\"") || failed[0].contains(" a"),
            "{failed:?}"
        );
        assert!(failed[0].contains("digest"), "{failed:?}");
    });
}

/// `require_digest` holds for a local file as for a server's: a
/// component that carries no digest is refused naming itself, and read
/// as it is without the option (the Python package reads its own files
/// so, docs/python.md).
#[test]
fn require_digest_refuses_a_local_component_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.zt");
    let data: Vec<u8> = (0..64u8).collect();
    let mut w = Writer::new(Vec::new(), "plain.zt").unwrap();
    let bare = StoreOptions {
        digest: None,
        ..StoreOptions::default()
    };
    w.add_dense("plain", &[64], DType::U8, &data, bare).unwrap();
    std::fs::write(&path, w.finish().unwrap()).unwrap();
    rt().block_on(async {
        let path = path.to_str().unwrap();
        let strict = Options {
            require_digest: true,
            ..Options::default()
        };
        let c = Client::open_local(path, strict).await.unwrap();
        let mut f = c.fetch(&[], None).await.unwrap();
        let err = f.next().await.unwrap().unwrap_err();
        assert!(matches!(err, Error::Unverifiable { .. }), "{err}");
        assert!(err.to_string().contains("plain"), "{err}");
        let c = Client::open_local(path, Options::default()).await.unwrap();
        let mut f = c.fetch(&[], None).await.unwrap();
        let got = f.next().await.unwrap().unwrap();
        assert_eq!(got.data.as_slice(), &data[..]);
    });
}

/// A FIFO where a model file was expected is refused at once, naming the
/// path and the rule, not waited on; the reader, the Python package's
/// local files and `zt info` all open files this way.
#[test]
fn a_fifo_named_as_a_model_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("m.zt");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success(), "mkfifo");
    // (`/dev/zero` is the unit test's, `zt_format::open_regular`: here a
    // regression would read it into memory until the machine ran out.)
    let path = fifo.to_str().unwrap();
    // Shut down without waiting for a blocking open stuck on the FIFO (as
    // a build before this one did), so the test fails, not hangs.
    let rt = rt();
    let opened = rt.block_on(async {
        let open = Client::open_local(path, Options::default());
        tokio::time::timeout(std::time::Duration::from_secs(20), open).await
    });
    rt.shutdown_background();
    let e = match opened {
        Err(_) => panic!("still opening after 20 s"),
        Ok(Ok(_)) => panic!("opened"),
        Ok(Err(e)) => {
            // The error and its causes, as `zt` prints them.
            let mut chain = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                chain = format!("{chain}: {c}");
                cause = c.source();
            }
            chain
        }
    };
    assert!(e.contains(path), "{e}");
    assert!(e.contains(zt_format::NOT_REGULAR), "{e}");
}
