#!/usr/bin/env python3
"""Writes the reject corpus: one small .zt file per validation rule, named
after the rule (`Rule::name` in zt-format). Standard library only, with a
tiny CBOR encoder that can also write what a real encoder refuses to
(duplicate keys, deep nesting). Run it from anywhere; files land beside it.

Every file is otherwise valid, so the rule in its name is the only fault."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    for add, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
        if n < 1 << (8 * struct.calcsize(fmt)):
            return bytes([major << 5 | add]) + struct.pack(fmt, n)
    raise ValueError(n)


def cbor(v):
    if isinstance(v, bool):
        return b"\xf5" if v else b"\xf4"
    if isinstance(v, int):
        return head(0, v) if v >= 0 else head(1, -1 - v)
    if isinstance(v, str):
        b = v.encode()
        return head(3, len(b)) + b
    if isinstance(v, bytes):
        return head(2, len(v)) + v
    if isinstance(v, list):
        return head(4, len(v)) + b"".join(cbor(x) for x in v)
    if isinstance(v, Pairs):
        return head(5, len(v.items)) + b"".join(cbor(k) + cbor(x) for k, x in v.items)
    if isinstance(v, dict):
        return cbor(Pairs(list(v.items())))
    raise TypeError(type(v))


class Pairs:
    """A CBOR map given as a list of pairs, so keys may repeat."""

    def __init__(self, items):
        self.items = items


def comp(offset=64, length=16, dtype="f32", **extra):
    d = {"dtype": dtype, "offset": offset, "length": length}
    d.update(extra)
    return d


def obj(components, shape=(4,), fmt="dense"):
    return {"shape": list(shape), "format": fmt, "components": components}


def manifest(objects, version="1.2.0"):
    return {"version": version, "objects": objects}


def v12(man, blobs=b"\0" * 56 + b"\1" * 16, raw_manifest=None, footer=b"ZTEN1000", size=None, header=b"ZTEN1000"):
    m = raw_manifest if raw_manifest is not None else cbor(man)
    n = len(m) if size is None else size
    return header + blobs + m + struct.pack("<Q", n) + footer


def nested(depth):
    v = []
    for _ in range(depth):
        v = [v]
    return v


GOOD = {"w": obj({"data": comp()})}

# A ragged object's blobs: offsets [0, 2, 1] (decreasing: wrong) at 64,
# three values at 128.
RAGGED_BLOBS = b"\0" * 56 + struct.pack("<3Q", 0, 2, 1) + b"\0" * 40 + b"abc"

CORPUS = {
    "too-short": b"ZTEN1000" + b"\0" * 8,
    "header-magic": v12(manifest(GOOD), header=b"ZTEN9999"),
    "footer-magic": v12(manifest(GOOD), footer=b"ZTEN2000", size=1 << 40),
    "manifest-over-cap": v12(manifest(GOOD), size=(1 << 30) + 1),
    "manifest-larger-than-file": v12(manifest(GOOD), size=100_000),
    "cbor-syntax": v12(None, raw_manifest=b"\xa2\x67version\xff"),
    "cbor-too-deep": v12(None, raw_manifest=cbor({"version": "1.2.0", "objects": {}, "attributes": {"x": nested(100)}})),
    "manifest-not-map": v12(None, raw_manifest=cbor(["version", "1.2.0"])),
    "duplicate-key": v12(None, raw_manifest=cbor(Pairs([("version", "1.2.0"), ("objects", Pairs([("w", obj({"data": comp()})), ("w", obj({"data": comp()}))]))]))),
    "missing-field": v12({"version": "1.2.0"}),
    "field-type": v12(manifest({"w": obj({"data": comp(offset="64")})})),
    "version": v12(manifest(GOOD, version="2.0.0")),
    "misaligned-offset": v12(manifest({"w": obj({"data": comp(offset=72, length=8, dtype="u8")}, shape=(8,))})),
    "range-overflow": v12(manifest({"w": obj({"data": comp(offset=64, length=(1 << 64) - 1, dtype="u8")}, shape=((1 << 64) - 1,))})),
    "out-of-bounds": v12(manifest({"w": obj({"data": comp(offset=64, length=4096, dtype="u8")}, shape=(4096,))})),
    "overlap": v12(manifest({"a": obj({"data": comp()}), "b": obj({"data": comp(length=8, dtype="u8")}, shape=(8,))})),
    "length-mismatch": v12(manifest({"w": obj({"data": comp()}, shape=(5,))})),
    "partial-element": v12(manifest({"w": obj({"x": comp(length=6)}, fmt="custom")})),
    "shape-overflow": v12(manifest({"w": obj({"data": comp()}, shape=(1 << 40, 1 << 40))})),
    "unknown-dtype": v12(manifest({"w": obj({"data": comp(dtype="float32")})})),
    "unknown-encoding": v12(manifest({"w": obj({"data": comp(encoding="lz4")})})),
    "type-dtype": v12(manifest({"w": obj({"data": comp(type="f8_e4m3fn")})})),
    "malformed-digest": v12(manifest({"w": obj({"data": comp(digest="sha256:1234")})})),
    "sparse-index-dtype": v12(manifest({"s": obj({"values": comp(offset=64, length=8), "indices": comp(offset=128, length=8, dtype="i32"), "indptr": comp(offset=192, length=8, dtype="u64")}, shape=(1, 4), fmt="sparse_csr")}), blobs=b"\0" * 184 + b"\1" * 8),
    "missing-component": v12(manifest({"s": obj({"values": comp()}, shape=(2, 2), fmt="sparse_csr")})),
    "ragged-shape": v12(manifest({"w": obj({"offsets": comp(length=24, dtype="u64"), "values": comp(offset=128, length=3, dtype="u8")}, shape=(2, 1), fmt="ragged")}), blobs=RAGGED_BLOBS),
    "ragged-offsets-length": v12(manifest({"w": obj({"offsets": comp(length=16, dtype="u64"), "values": comp(offset=128, length=3, dtype="u8")}, shape=(2,), fmt="ragged")}), blobs=RAGGED_BLOBS),
    # Valid structure; fails on read and in `zt verify`.
    "ragged-offsets": v12(manifest({"w": obj({"offsets": comp(length=24, dtype="u64"), "values": comp(offset=128, length=3, dtype="u8")}, shape=(2,), fmt="ragged")}), blobs=RAGGED_BLOBS),
    "digest-mismatch": v12(manifest({"w": obj({"data": comp(digest="crc32c:0x00000000")})})),
    "decompress-over-cap": v12(manifest({"w": obj({"data": comp(dtype="u8", encoding="zstd", uncompressed_length=40 << 30)}, shape=(40 << 30,))})),
    "zstd-without-length": v12(manifest({"w": obj({"data": comp(encoding="zstd")})})),
}

if __name__ == "__main__":
    for name, data in CORPUS.items():
        with open(os.path.join(HERE, name + ".zt"), "wb") as f:
            f.write(data)
    print(f"wrote {len(CORPUS)} files to {HERE}")
