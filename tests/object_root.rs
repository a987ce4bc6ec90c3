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

use common::s3::{credentials, servers, Kind, KEY, S3, SECRET};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_reads_ranges_and_names_what_changed_or_is_missing() {
    for (kind, bin) in servers() {
        eprintln!("with {}", kind.name());
        on(kind, &bin).await;
    }
}

async fn on(kind: Kind, bin: &std::path::Path) {
    let s3 = S3::start(kind, bin, "models");
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
    if kind.checks_signatures() {
        assert!(wrong.check().await.is_err());
    }
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

    let registry = prometheus::Registry::new();
    root.register_metrics(&registry).unwrap();
    let mut metrics = Vec::new();
    prometheus::Encoder::encode(
        &prometheus::TextEncoder::new(),
        &registry.gather(),
        &mut metrics,
    )
    .unwrap();
    let metrics = String::from_utf8(metrics).unwrap();
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

/// Keys as a listing gives them are read as they are: non-ASCII, spaces,
/// `+`, `=`, `%` and the characters S3 advises against.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_round_trip_from_the_listing_to_reads() {
    const NAMES: [&str; 5] = [
        "café.zt",
        "sp ace+plus=eq.zt",
        "pct%41%2F%zz.zt",
        "odd#[]{}^|~<>\".zt",
        "ünï/cödé/日本.zt",
    ];
    for (kind, bin) in servers() {
        let s3 = S3::start(kind, &bin, "models");
        let up = s3.uploader("models");
        for (i, name) in NAMES.iter().enumerate() {
            let key = KeyPath::parse(format!("prod/{name}")).unwrap();
            up.put(&key, PutPayload::from(vec![i as u8; 64]))
                .await
                .unwrap();
        }
        let root = ObjectRoot::open_with("s3://models/prod", &s3.config(), credentials()).unwrap();
        let listed = root.list().await.unwrap();
        let mut keys: Vec<&str> = listed.iter().map(|l| l.key.as_str()).collect();
        keys.sort_unstable();
        let mut want = NAMES.to_vec();
        want.sort_unstable();
        assert_eq!(keys, want, "{}", kind.name());
        for l in &listed {
            let i = NAMES.iter().position(|n| *n == l.key).unwrap();
            let got = root.read(&l.key, l.etag.as_deref(), 8..16).await;
            let got = got.unwrap_or_else(|e| panic!("{}: {}: {e}", kind.name(), l.key));
            assert_eq!(&got[..], &[i as u8; 8], "{}: {}", kind.name(), l.key);
        }
    }
}

/// Issue 26, item 2: one precedence for every storage setting, flag >
/// `ZTSERVE_*` > config file > the store's own `AWS_*` variables >
/// default, where an unset setting never overrides: a store configured
/// with `AWS_*` variables alone (an `http://` endpoint and
/// `AWS_ALLOW_HTTP=true`) is listed; without `AWS_ALLOW_HTTP`, or with
/// `storage.allow_http = false` over it, the root is refused at once
/// naming what to set, instead of failing every request with "builder
/// error".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stores_own_variables_apply_unless_a_setting_overrides_them() {
    use ztserve::server::config::StorageConfig;
    for (kind, bin) in servers() {
        let s3 = S3::start(kind, &bin, "models");
        let up = s3.uploader("models");
        let sample = std::fs::read(common::repo().join("models/sample.zt")).unwrap();
        up.put(&KeyPath::from("prod/sample.zt"), PutPayload::from(sample))
            .await
            .unwrap();
        let env = |allow: Option<&str>| {
            let mut env = credentials();
            env.push(("AWS_ENDPOINT".to_owned(), s3.endpoint.clone()));
            env.push(("AWS_REGION".to_owned(), "us-east-1".to_owned()));
            if let Some(a) = allow {
                env.push(("AWS_ALLOW_HTTP".to_owned(), a.to_owned()));
            }
            env
        };
        let unset = StorageConfig::default();
        let root = ObjectRoot::open_with("s3://models/prod", &unset, env(Some("true"))).unwrap();
        let listed = root.list().await.unwrap();
        assert_eq!(listed.len(), 1, "{}", kind.name());
        // Off by default, or by a setting over the variable: refused at
        // once, naming the setting to change.
        for (config, allow, remedy) in [
            (
                unset.clone(),
                None,
                "set AWS_ALLOW_HTTP=true or storage.allow_http = true",
            ),
            (
                StorageConfig {
                    allow_http: Some(false),
                    ..unset.clone()
                },
                Some("true"),
                "storage.allow_http is false",
            ),
        ] {
            let e = ObjectRoot::open_with("s3://models/prod", &config, env(allow)).unwrap_err();
            assert!(matches!(e, StoreError::Config(_)), "{e:?}");
            let why = e.to_string();
            assert!(
                why.contains("is http:// but allow_http is off") && why.contains(remedy),
                "{why}"
            );
        }
        // The setting over the variable, the other way round.
        let config = StorageConfig {
            allow_http: Some(true),
            ..unset.clone()
        };
        let root = ObjectRoot::open_with("s3://models/prod", &config, env(Some("false"))).unwrap();
        root.check().await.unwrap();
    }
}
