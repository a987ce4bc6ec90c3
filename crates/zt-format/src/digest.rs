//! Component digests: `sha256:<64 hex>` and `crc32c:0x<8 hex>`, over the
//! stored bytes (the compressed bytes for zstd), and `blake3:<64 hex>`,
//! which a server may compute for components that carry no digest of
//! their own (never written into a `.zt` file: the format names sha256
//! and crc32c). The format writes `algorithm:hex`; a client that does
//! not know an algorithm refuses it by name.

use sha2::{Digest as _, Sha256};

use crate::error::Rule;

/// A digest algorithm this crate can compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestAlgorithm {
    Sha256,
    Crc32c,
    /// BLAKE3 (256-bit output): a cryptographic hash about 2.5 times as
    /// fast as sha256 on one core of the bench machine (SHA extensions,
    /// AVX-512), for digests a server computes.
    Blake3,
}

impl DigestAlgorithm {
    /// Every algorithm this crate computes.
    pub const ALL: [DigestAlgorithm; 3] = [
        DigestAlgorithm::Sha256,
        DigestAlgorithm::Crc32c,
        DigestAlgorithm::Blake3,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DigestAlgorithm::Sha256 => "sha256",
            DigestAlgorithm::Crc32c => "crc32c",
            DigestAlgorithm::Blake3 => "blake3",
        }
    }

    /// Whether the format names this algorithm, so that a `.zt` file may
    /// carry it (sha256 and crc32c; blake3 is for the digests a server
    /// computes).
    pub fn in_zt_files(self) -> bool {
        match self {
            DigestAlgorithm::Sha256 | DigestAlgorithm::Crc32c => true,
            DigestAlgorithm::Blake3 => false,
        }
    }

    /// Digests `data` in one pass.
    pub fn digest(self, data: &[u8]) -> Digest {
        let mut h = Hasher::new(self);
        h.update(data);
        h.finish()
    }
}

/// A parsed digest. The text is kept exactly as the file wrote it: as
/// the value alone when it is the canonical spelling (`sha256:` and 64
/// lower-case hex digits, `crc32c:0x` and 8 upper-case ones), which a
/// manifest of a million components then holds in 40 bytes each, not a
/// 71-byte string besides; any other spelling is boxed with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest {
    repr: Repr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Repr {
    /// The canonical spelling of the value.
    Canonical(DigestValue),
    /// Another spelling, as written, and its value.
    Spelled(Box<(Box<str>, DigestValue)>),
}

/// The value of a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DigestValue {
    Sha256([u8; 32]),
    Crc32c(u32),
    Blake3([u8; 32]),
    /// An algorithm this crate does not know; data under it cannot be verified.
    Unknown {
        algorithm: String,
    },
}

/// The canonical spelling of `value`.
fn canonical(value: &DigestValue) -> String {
    match value {
        DigestValue::Sha256(b) => format!("sha256:{}", hex::encode(b)),
        DigestValue::Crc32c(v) => format!("crc32c:0x{v:08X}"),
        DigestValue::Blake3(b) => format!("blake3:{}", hex::encode(b)),
        DigestValue::Unknown { algorithm } => format!("{algorithm}:"),
    }
}

/// The value of `text` when it is a known algorithm's canonical spelling
/// (what [`canonical`] writes); `None` for anything else, which
/// [`Digest::parse`] reads the general way.
fn canonical_value(text: &[u8]) -> Option<DigestValue> {
    // Hex digits by table, without a branch a digit (they are random):
    // upper-case letters for crc32c, lower-case for the others, as
    // `canonical` writes them; anything else has a high bit set.
    // Evaluated at compile time: an index or a sum out of range fails the build.
    #[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
    const fn table(letters: u8) -> [u8; 256] {
        let mut t = [0xff; 256];
        let mut i = 0;
        while i < 10 {
            t[b'0' as usize + i] = i as u8;
            i += 1;
        }
        let mut i = 0;
        while i < 6 {
            t[letters as usize + i] = 10 + i as u8;
            i += 1;
        }
        t
    }
    static UPPER: [u8; 256] = table(b'A');
    static LOWER: [u8; 256] = table(b'a');
    let nibble = |t: &[u8; 256], b: u8| t.get(usize::from(b)).copied().unwrap_or(0xff);
    let bytes32 = |hex: &[u8]| -> Option<[u8; 32]> {
        let mut out = [0u8; 32];
        if hex.len() != 64 {
            return None;
        }
        let mut bad = 0u8;
        for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
            let [hi, lo] = *pair else { return None };
            let (hi, lo) = (nibble(&LOWER, hi), nibble(&LOWER, lo));
            bad |= hi | lo;
            *o = hi << 4 | lo;
        }
        (bad & 0xf0 == 0).then_some(out)
    };
    if let Some(hex) = text.strip_prefix(b"crc32c:0x") {
        if hex.len() != 8 {
            return None;
        }
        let (mut v, mut bad) = (0u32, 0u8);
        for &b in hex {
            let d = nibble(&UPPER, b);
            bad |= d;
            v = v << 4 | u32::from(d & 0x0f);
        }
        return (bad & 0xf0 == 0).then_some(DigestValue::Crc32c(v));
    }
    if let Some(hex) = text.strip_prefix(b"sha256:") {
        return bytes32(hex).map(DigestValue::Sha256);
    }
    text.strip_prefix(b"blake3:")
        .and_then(bytes32)
        .map(DigestValue::Blake3)
}

/// Whether `value_text`, the text after `algorithm:` that parsed as
/// `value`, is its canonical spelling (what [`canonical`] writes), decided
/// without writing it: a manifest's every component takes this test.
fn is_canonical(value: &DigestValue, value_text: &str) -> bool {
    let digits = |t: &str, ok: fn(&u8) -> bool| t.bytes().all(|b| ok(&b));
    match value {
        // Lower-case hex; `parse` checked there are 64 hex digits.
        DigestValue::Sha256(_) | DigestValue::Blake3(_) => {
            digits(value_text, |b| !b.is_ascii_uppercase())
        }
        DigestValue::Crc32c(_) => value_text.strip_prefix("0x").is_some_and(|d| {
            d.len() == 8 && digits(d, |b| b.is_ascii_digit() || b.is_ascii_uppercase())
        }),
        DigestValue::Unknown { .. } => value_text.is_empty(),
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_str())
    }
}

impl Digest {
    /// Parses `algorithm:value`. A known algorithm with a malformed value is
    /// an error; an unknown algorithm is kept as [`DigestValue::Unknown`].
    pub fn parse(text: &str) -> Result<Digest, Rule> {
        // What writers write, read without the general path's steps (a
        // manifest's every component has one).
        match canonical_value(text.as_bytes()) {
            Some(value) => Ok(Digest {
                repr: Repr::Canonical(value),
            }),
            None => Digest::parse_any(text),
        }
    }

    /// [`Digest::parse`] for any spelling.
    fn parse_any(text: &str) -> Result<Digest, Rule> {
        let malformed = |reason| Rule::MalformedDigest {
            value: text.to_owned(),
            reason,
        };
        let (algorithm, hex_part) = text
            .split_once(':')
            .ok_or_else(|| malformed("expected \"algorithm:value\""))?;
        // 64 hex digits: (the error when there are not, when not hex).
        let bytes32 = |errors: (&'static str, &'static str)| -> Result<[u8; 32], Rule> {
            let mut out = [0u8; 32];
            if hex_part.len() != 64 {
                return Err(malformed(errors.0));
            }
            hex::decode_to_slice(hex_part, &mut out).map_err(|_| malformed(errors.1))?;
            Ok(out)
        };
        let value = match algorithm {
            "sha256" => DigestValue::Sha256(bytes32((
                "sha256 takes 64 hex digits",
                "sha256 value is not hex",
            ))?),
            "blake3" => DigestValue::Blake3(bytes32((
                "blake3 takes 64 hex digits",
                "blake3 value is not hex",
            ))?),
            "crc32c" => {
                let digits = hex_part
                    .strip_prefix("0x")
                    .or_else(|| hex_part.strip_prefix("0X"))
                    .ok_or_else(|| malformed("crc32c value must start with 0x"))?;
                if digits.is_empty()
                    || digits.len() > 8
                    || !digits.bytes().all(|b| b.is_ascii_hexdigit())
                {
                    return Err(malformed("crc32c takes 1 to 8 hex digits after 0x"));
                }
                let v = u32::from_str_radix(digits, 16)
                    .map_err(|_| malformed("crc32c value is not hex"))?;
                DigestValue::Crc32c(v)
            }
            "" => return Err(malformed("empty algorithm name")),
            other => DigestValue::Unknown {
                algorithm: other.to_owned(),
            },
        };
        let repr = match is_canonical(&value, hex_part) {
            true => Repr::Canonical(value),
            false => Repr::Spelled(Box::new((text.into(), value))),
        };
        Ok(Digest { repr })
    }

    /// The digest as the file wrote it.
    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        match &self.repr {
            Repr::Spelled(spelled) => std::borrow::Cow::Borrowed(&spelled.0),
            Repr::Canonical(value) => std::borrow::Cow::Owned(canonical(value)),
        }
    }

    pub fn value(&self) -> &DigestValue {
        match &self.repr {
            Repr::Canonical(value) => value,
            Repr::Spelled(spelled) => &spelled.1,
        }
    }

    /// The algorithm, when this crate knows it.
    pub fn algorithm(&self) -> Option<DigestAlgorithm> {
        match self.value() {
            DigestValue::Sha256(_) => Some(DigestAlgorithm::Sha256),
            DigestValue::Crc32c(_) => Some(DigestAlgorithm::Crc32c),
            DigestValue::Blake3(_) => Some(DigestAlgorithm::Blake3),
            DigestValue::Unknown { .. } => None,
        }
    }

    /// The algorithm's name and the hash, when this is a cryptographic
    /// digest (sha256, blake3): bytes it names are those bytes wherever
    /// it appears.
    pub fn cryptographic(&self) -> Option<(&'static str, &[u8; 32])> {
        match self.value() {
            DigestValue::Sha256(b) => Some(("sha256", b)),
            DigestValue::Blake3(b) => Some(("blake3", b)),
            _ => None,
        }
    }

    /// The sha256 bytes, when this is a sha256 digest.
    pub fn sha256(&self) -> Option<&[u8; 32]> {
        match self.value() {
            DigestValue::Sha256(b) => Some(b),
            _ => None,
        }
    }

    /// The CRC-32C digest of value `value`.
    pub fn from_crc32c(value: u32) -> Digest {
        Digest::from_value(DigestValue::Crc32c(value))
    }

    fn from_value(value: DigestValue) -> Digest {
        Digest {
            repr: Repr::Canonical(value),
        }
    }

    /// Checks `data` against this digest. The computed value is compared
    /// as a number; its text is made only for the error.
    pub fn check(&self, data: &[u8]) -> Result<(), Rule> {
        let actual = match self.value() {
            DigestValue::Sha256(_) => DigestValue::Sha256(Sha256::digest(data).into()),
            // CRC-32C fits in 32 bits; crc-fast hands every width back as u64.
            DigestValue::Crc32c(_) => DigestValue::Crc32c(crc_fast::checksum(
                crc_fast::CrcAlgorithm::Crc32Iscsi,
                data,
            ) as u32),
            DigestValue::Blake3(_) => DigestValue::Blake3(*blake3::hash(data).as_bytes()),
            DigestValue::Unknown { .. } => return Err(self.unknown()),
        };
        if *self.value() == actual {
            Ok(())
        } else {
            self.compare(&Digest::from_value(actual))
        }
    }

    /// Compares with a digest computed by a [`Hasher`].
    pub fn compare(&self, actual: &Digest) -> Result<(), Rule> {
        if matches!(self.value(), DigestValue::Unknown { .. }) {
            return Err(self.unknown());
        }
        if self.value() == actual.value() {
            Ok(())
        } else {
            Err(Rule::DigestMismatch {
                expected: self.as_str().into_owned(),
                actual: actual.as_str().into_owned(),
            })
        }
    }

    fn unknown(&self) -> Rule {
        let algorithm = match self.value() {
            DigestValue::Unknown { algorithm } => algorithm.clone(),
            _ => String::new(),
        };
        Rule::UnknownDigestAlgorithm { algorithm }
    }
}

/// An incremental digest, for data that arrives in pieces.
#[derive(Debug, Clone)]
pub struct Hasher {
    state: HasherState,
}

#[derive(Debug, Clone)]
enum HasherState {
    Sha256(Box<Sha256>),
    Crc32c(Box<crc_fast::Digest>),
    Blake3(Box<blake3::Hasher>),
}

impl Hasher {
    pub fn new(algorithm: DigestAlgorithm) -> Self {
        let state = match algorithm {
            DigestAlgorithm::Sha256 => HasherState::Sha256(Box::new(Sha256::new())),
            DigestAlgorithm::Crc32c => HasherState::Crc32c(Box::new(crc_fast::Digest::new(
                crc_fast::CrcAlgorithm::Crc32Iscsi,
            ))),
            DigestAlgorithm::Blake3 => HasherState::Blake3(Box::new(blake3::Hasher::new())),
        };
        Hasher { state }
    }

    pub fn update(&mut self, data: &[u8]) {
        match &mut self.state {
            HasherState::Sha256(h) => h.update(data),
            HasherState::Crc32c(c) => c.update(data),
            HasherState::Blake3(h) => {
                h.update(data);
            }
        }
    }

    pub fn finish(self) -> Digest {
        let value = match self.state {
            HasherState::Sha256(h) => DigestValue::Sha256(h.finalize().into()),
            // CRC-32C fits in 32 bits; crc-fast hands every width back as u64.
            HasherState::Crc32c(c) => DigestValue::Crc32c(c.finalize() as u32),
            HasherState::Blake3(h) => DigestValue::Blake3(*h.finalize().as_bytes()),
        };
        Digest::from_value(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_match_the_reference_writer() {
        let d = DigestAlgorithm::Crc32c.digest(b"123456789");
        assert_eq!(d.as_str(), "crc32c:0xE3069283");
        let s = DigestAlgorithm::Sha256.digest(b"");
        assert_eq!(
            s.as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(Digest::parse(&s.as_str()).unwrap(), s);
        // The reference implementation's hash of no bytes.
        let b = DigestAlgorithm::Blake3.digest(b"");
        assert_eq!(
            b.as_str(),
            "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
        assert_eq!(Digest::parse(&b.as_str()).unwrap(), b);
        assert!(b.check(b"").is_ok());
        assert!(matches!(b.check(b"x"), Err(Rule::DigestMismatch { .. })));
    }

    /// A digest spelled otherwise than canonically keeps its spelling;
    /// a canonical one is kept as its value alone.
    #[test]
    fn spellings_are_kept() {
        let lower = "crc32c:0xe3069283";
        let d = Digest::parse(lower).unwrap();
        assert_eq!(d.as_str(), lower);
        assert_eq!(d.value(), &DigestValue::Crc32c(0xE306_9283));
        assert_ne!(d, DigestAlgorithm::Crc32c.digest(b"123456789"));
        let canonical = Digest::parse("crc32c:0xE3069283").unwrap();
        assert_eq!(canonical, DigestAlgorithm::Crc32c.digest(b"123456789"));
        assert!(matches!(canonical.repr, Repr::Canonical(_)));
        assert!(d.compare(&canonical).is_ok());
    }

    /// The test without writing agrees with writing the canonical
    /// spelling and comparing, on every kind of spelling.
    #[test]
    fn canonical_is_decided_as_if_written() {
        let sha = "sha256:".to_owned() + &"0a".repeat(32);
        let sha_upper = "sha256:".to_owned() + &"0A".repeat(32);
        let blake = "blake3:".to_owned() + &"0a".repeat(32);
        let blake_upper = "blake3:".to_owned() + &"0A".repeat(32);
        for text in [
            "crc32c:0xE3069283",
            "crc32c:0xe3069283",
            "crc32c:0XE3069283",
            "crc32c:0x0000ABCD",
            "crc32c:0xABCD",
            "crc32c:0x00000000",
            sha.as_str(),
            sha_upper.as_str(),
            blake.as_str(),
            blake_upper.as_str(),
            "xxh3:",
            "xxh3:00",
        ] {
            let d = Digest::parse(text).unwrap();
            let written = canonical(d.value()) == text;
            assert_eq!(matches!(d.repr, Repr::Canonical(_)), written, "{text}");
            assert_eq!(d.as_str(), text, "{text}: the spelling is kept either way");
        }
    }

    /// The shortcut for canonical spellings of the known algorithms reads
    /// exactly what the general path reads as their canonical spellings,
    /// to the same value, and nothing else (an unknown algorithm's is
    /// left to the general path).
    #[test]
    fn the_canonical_shortcut_agrees_with_the_general_path() {
        let mut texts: Vec<String> = Vec::new();
        for v in [0u32, 1, 0xE306_9283, 0xABCD, u32::MAX] {
            texts.push(canonical(&DigestValue::Crc32c(v)));
            texts.push(format!("crc32c:0x{v:08x}"));
            texts.push(format!("crc32c:0x{v:X}"));
            texts.push(format!("crc32c:0X{v:08X}"));
        }
        for b in [[0u8; 32], [0xab; 32], [0x5f; 32]] {
            for alg in ["sha256", "blake3"] {
                texts.push(format!("{alg}:{}", hex::encode(b)));
                texts.push(format!("{alg}:{}", hex::encode_upper(b)));
                texts.push(format!("{alg}:{}", &hex::encode(b)[1..]));
                texts.push(format!("{alg}:{}0", hex::encode(b)));
            }
        }
        texts.extend(
            [
                "crc32c:0x",
                "crc32c:0xG0000000",
                "sha256:",
                "xxh3:00",
                "xxh3:",
                ":",
            ]
            .map(String::from),
        );
        let mut shortcuts = 0;
        for text in &texts {
            let general = Digest::parse_any(text);
            match canonical_value(text.as_bytes()) {
                Some(v) => {
                    shortcuts += 1;
                    assert_eq!(general.unwrap().repr, Repr::Canonical(v), "{text}");
                }
                None => assert!(
                    !matches!(
                        general,
                        Ok(Digest {
                            repr: Repr::Canonical(
                                DigestValue::Crc32c(_)
                                    | DigestValue::Sha256(_)
                                    | DigestValue::Blake3(_)
                            )
                        })
                    ),
                    "{text}: canonical, yet not read by the shortcut"
                ),
            }
        }
        assert_eq!(shortcuts, 17, "each value's canonical spelling, some twice");
    }

    /// Pieces of any size hash like the whole (the transports feed
    /// whatever the network hands them).
    #[test]
    fn pieces_hash_like_the_whole() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 253) as u8).collect();
        for alg in [
            DigestAlgorithm::Crc32c,
            DigestAlgorithm::Sha256,
            DigestAlgorithm::Blake3,
        ] {
            let whole = alg.digest(&data);
            for piece in [1, 63, 1200, 4096, 65_537] {
                let mut h = Hasher::new(alg);
                data.chunks(piece).for_each(|c| h.update(c));
                assert_eq!(h.finish(), whole, "{alg:?} in pieces of {piece}");
            }
        }
    }

    #[test]
    fn malformed_known_digests_are_rejected() {
        for bad in [
            "sha256:abc",
            "crc32c:1234",
            "crc32c:0xZZ",
            "nocolon",
            "sha256:",
            "blake3:00",
            ":x",
        ] {
            assert!(
                matches!(Digest::parse(bad), Err(Rule::MalformedDigest { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn unknown_algorithms_cannot_verify() {
        let d = Digest::parse("xxh3:00").unwrap();
        assert!(matches!(
            d.check(b"x"),
            Err(Rule::UnknownDigestAlgorithm { .. })
        ));
    }

    #[test]
    fn incremental_equals_one_shot() {
        let mut h = Hasher::new(DigestAlgorithm::Crc32c);
        h.update(b"12345");
        h.update(b"6789");
        assert!(Digest::parse("crc32c:0xe3069283")
            .unwrap()
            .compare(&h.finish())
            .is_ok());
    }
}
