//! The per-byte costs a transfer pays, by implementation, on this machine:
//! the digests a client verifies (sha256 from the `sha2` crate we use,
//! ring and aws-lc-rs; BLAKE3 on one thread; CRC-32C), and QUIC's packet
//! protection (AES-128-GCM and AES-256-GCM, TLS 1.3's two AES cipher
//! suites, sealing and opening packets of 1,400 and 6,500 bytes) by the
//! two rustls providers available as crates, aws-lc-rs (the daemon's,
//! "ours" below) and ring (the client's). Ratios are against the daemon's
//! sealing with AES-128-GCM.
//!
//! `cargo bench --features bench-crypto --bench crypto` (medians of 7
//! passes over 256 MiB in memory). Not part of `.ci/run`.

use std::hint::black_box;
use std::time::Instant;

/// GB/s of `f` over `bytes`, the median of 7 passes.
fn rate(bytes: usize, mut f: impl FnMut()) -> f64 {
    let mut v: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            f();
            bytes as f64 / t.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v.get(3).copied().unwrap_or(f64::NAN)
}

fn row(name: &str, gbs: f64, ours: f64) {
    println!("{name:<44} {gbs:>6.2} GB/s   {:.3}x ours", gbs / ours);
}

fn digests(data: &[u8]) {
    use sha2::Digest;
    let n = data.len();
    println!("# digests of {n} bytes; ours: sha256 from the sha2 crate");
    let ours = rate(n, || {
        black_box(sha2::Sha256::digest(data));
    });
    row("sha256 (sha2, ours)", ours, ours);
    let ring = rate(n, || {
        black_box(ring::digest::digest(&ring::digest::SHA256, data));
    });
    row("sha256 (ring)", ring, ours);
    let aws = rate(n, || {
        black_box(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data));
    });
    row("sha256 (aws-lc-rs)", aws, ours);
    let b3 = rate(n, || {
        black_box(blake3::hash(data));
    });
    row("BLAKE3, one thread", b3, ours);
    let crc = rate(n, || {
        black_box(crc32c::crc32c(data));
    });
    row("CRC-32C", crc, ours);
}

/// The AEAD algorithms of TLS 1.3's two AES-GCM cipher suites, by provider.
struct Suite {
    name: &'static str,
    key_len: usize,
    ring: &'static ring::aead::Algorithm,
    aws: &'static aws_lc_rs::aead::Algorithm,
}

const SUITES: [Suite; 2] = [
    Suite {
        name: "AES-128-GCM",
        key_len: 16,
        ring: &ring::aead::AES_128_GCM,
        aws: &aws_lc_rs::aead::AES_128_GCM,
    },
    Suite {
        name: "AES-256-GCM",
        key_len: 32,
        ring: &ring::aead::AES_256_GCM,
        aws: &aws_lc_rs::aead::AES_256_GCM,
    },
];

/// Sealing (the daemon's side) by both providers, and opening (the
/// client's side, on ring), of `packet`-byte packets with `suite`; the
/// ratios are against the daemon's sealing with AES-128-GCM, `base`.
fn packet_protection(suite: &Suite, packet: usize, base: Option<f64>) -> f64 {
    let key = vec![7u8; suite.key_len];
    let count = (64usize << 20) / packet;
    let bytes = count * packet;
    let mut buf = vec![0u8; packet];
    println!(
        "# {} sealing {count} packets of {packet} bytes; ours: aws-lc-rs, AES-128-GCM",
        suite.name
    );
    let rk = ring::aead::LessSafeKey::new(
        ring::aead::UnboundKey::new(suite.ring, &key).expect("a key of the suite's length"),
    );
    let ring = rate(bytes, || {
        for i in 0..count {
            let nonce = ring::aead::Nonce::assume_unique_for_key([(i % 251) as u8; 12]);
            let tag = rk.seal_in_place_separate_tag(nonce, ring::aead::Aad::empty(), &mut buf);
            black_box(tag.ok());
        }
    });
    let ak = aws_lc_rs::aead::LessSafeKey::new(
        aws_lc_rs::aead::UnboundKey::new(suite.aws, &key).expect("a key of the suite's length"),
    );
    let aws = rate(bytes, || {
        for i in 0..count {
            let nonce = aws_lc_rs::aead::Nonce::assume_unique_for_key([(i % 251) as u8; 12]);
            let tag = ak.seal_in_place_separate_tag(nonce, aws_lc_rs::aead::Aad::empty(), &mut buf);
            black_box(tag.ok());
        }
    });
    // One sealed packet, opened again and again (a copy each time, as the
    // opening is in place); the copy is timed too, as the client copies
    // each datagram out of its receive batch.
    let nonce = || ring::aead::Nonce::assume_unique_for_key([1; 12]);
    let mut sealed = vec![0u8; packet];
    let tag = rk
        .seal_in_place_separate_tag(nonce(), ring::aead::Aad::empty(), &mut sealed)
        .expect("sealing");
    sealed.extend_from_slice(tag.as_ref());
    let mut work = sealed.clone();
    let open = rate(bytes, || {
        for _ in 0..count {
            work.copy_from_slice(&sealed);
            let plain = rk.open_in_place(nonce(), ring::aead::Aad::empty(), &mut work);
            black_box(plain.is_ok());
        }
    });
    let base = base.unwrap_or(aws);
    row("sealing, aws-lc-rs (the daemon's)", aws, base);
    row("sealing, ring", ring, base);
    row("opening, ring (the client's), with a copy", open, base);
    aws
}

fn main() {
    let data: Vec<u8> = (0..256usize << 20).map(|i| (i * 31 % 251) as u8).collect();
    digests(&data);
    for packet in [1400, 6500] {
        let base = SUITES
            .first()
            .map(|suite| packet_protection(suite, packet, None));
        for suite in SUITES.get(1..).unwrap_or_default() {
            packet_protection(suite, packet, base);
        }
    }
}
