//! An object-storage root against a real S3 server (`s3s-fs`, which
//! `scripts/test.sh` installs): files uploaded through the S3 API are
//! listed under the root's prefix with their sizes and ETags, read back by
//! ranged GETs, refused as changed once replaced, missing ones named, and
//! an unreachable store reported as such; every request is counted.
//!
//! SKIPPED without `s3s-fs` (`$ZT_S3S_FS` or `target/tools/bin/s3s-fs`),
//! unless `ZT_REQUIRE_S3=1`.

mod common;

use std::time::{Duration, Instant};

use object_store::path::Path as KeyPath;
use object_store::{ObjectStoreExt, PutPayload};
use ztserve::server::object_root::{ObjectRoot, StoreError};

use common::s3::{credentials, s3s_fs, KEY, S3, SECRET};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_reads_ranges_and_names_what_changed_or_is_missing() {
    let Some(bin) = s3s_fs() else { return };
    let s3 = S3::start(&bin, "models");
    let up = s3.uploader("models");
    let sample = std::fs::read(common::repo().join("models/sample.zt")).unwrap();
    for key in [
        "prod/sample.zt",
        "prod/nested/dir/sample.zt",
        "other/skip.zt",
    ] {
        up.put(&KeyPath::from(key), PutPayload::from(sample.clone()))
            .await
            .unwrap();
    }
    let root = ObjectRoot::open_with("s3://models/prod", &s3.config(), credentials()).unwrap();
    root.check().await.unwrap();

    // Credentials from an AWS shared credentials file's profile; a profile
    // with the wrong secret is refused by the store.
    let files = tempfile::tempdir().unwrap();
    let creds = files.path().join("credentials");
    std::fs::write(
        &creds,
        format!("[default]\naws_access_key_id = {KEY}\naws_secret_access_key = wrong\n[zt]\naws_access_key_id = {KEY}\naws_secret_access_key = {SECRET}\n"),
    )
    .unwrap();
    let env = |profile: &str| {
        vec![
            (
                "AWS_SHARED_CREDENTIALS_FILE".to_owned(),
                creds.display().to_string(),
            ),
            ("AWS_PROFILE".to_owned(), profile.to_owned()),
            ("HOME".to_owned(), "/nonexistent".to_owned()),
        ]
    };
    let from_file = ObjectRoot::open_with("s3://models/prod", &s3.config(), env("zt")).unwrap();
    from_file.check().await.unwrap();
    let wrong = ObjectRoot::open_with("s3://models/prod", &s3.config(), env("default")).unwrap();
    assert!(wrong.check().await.is_err());
    let listed = root.list().await.unwrap();
    let keys: Vec<&str> = listed.iter().map(|l| l.key.as_str()).collect();
    assert_eq!(keys, ["nested/dir/sample.zt", "sample.zt"]);
    for l in &listed {
        assert_eq!(l.size, sample.len() as u64);
        assert!(l.etag.is_some(), "{}: no ETag", l.key);
    }

    // Ranged reads, pinned to the listed version: the footer, a middle.
    let first = &listed[1];
    let etag = first.etag.as_deref();
    let n = sample.len() as u64;
    for range in [0..8, n - 16..n, 64..4096] {
        let got = root.read("sample.zt", etag, range.clone()).await.unwrap();
        assert_eq!(&got[..], &sample[range.start as usize..range.end as usize]);
    }

    // Replaced: a read pinned to the old version fails as changed.
    let mut other = sample.clone();
    other[100] ^= 0xff;
    up.put(&KeyPath::from("prod/sample.zt"), PutPayload::from(other))
        .await
        .unwrap();
    let e = root.read("sample.zt", etag, 0..8).await.unwrap_err();
    assert!(matches!(e, StoreError::Changed { .. }), "{e}");
    assert!(
        e.to_string().contains("sample.zt") && e.to_string().contains("changed"),
        "{e}"
    );

    // Missing.
    let e = root.read("gone.zt", None, 0..8).await.unwrap_err();
    assert!(matches!(e, StoreError::NotFound { .. }), "{e}");

    let mut metrics = String::new();
    root.render_metrics(&mut metrics);
    assert!(
        metrics.contains("ztserve_store_requests_total{op=\"get\"} 5"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ztserve_store_failures_total 2"),
        "{metrics}"
    );

    // Unreachable: the store stopped; a bounded wait, and the URL named.
    drop(s3);
    let started = Instant::now();
    let e = root.check().await.unwrap_err();
    assert!(matches!(e, StoreError::Unreachable { .. }), "{e}");
    assert!(e.to_string().contains("s3://models/prod"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}
