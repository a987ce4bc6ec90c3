"""Writes one .gguf file per rule a GGUF header can break (docs/sources.md);
each is named for the rule, and tests/reject_corpus.rs checks that reading
it fails with exactly that rule, naming the file. Standard library only.
Run from this directory: python3 make_corpus.py"""
import struct


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def header(tensors, kvs, version=3, magic=b"GGUF"):
    return magic + struct.pack("<IQQ", version, tensors, kvs)


def kv_u32(key, v):
    return s(key) + struct.pack("<II", 4, v)


def kv_str(key, v):
    return s(key) + struct.pack("<I", 8) + s(v)


def tensor(name, dims, t, off):
    return s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", t, off)


def padded(b, align=32):
    return b + b"\0" * (-len(b) % align)


def f32_file(dims=(4,), t=0, off=0, data=16, extra=b"", kvs=b"", nkv=0):
    return padded(header(1, nkv) + kvs + tensor("w", dims, t, off) + extra) + b"\1" * data


CORPUS = {
    "header-magic": f32_file().replace(b"GGUF", b"GGML", 1),
    "version": header(0, 0, version=1),
    "counts": header(1 << 40, 0) + s("w"),
    "truncated": header(1, 0) + s("w") + struct.pack("<I", 1),
    "utf8": header(0, 1) + s(b"k\xff") + struct.pack("<II", 4, 1),
    "value-type": header(0, 1) + s("k") + struct.pack("<I", 99),
    "duplicate-key": header(0, 2) + kv_u32("k", 1) + kv_u32("k", 2),
    "alignment": f32_file(kvs=kv_u32("general.alignment", 3), nkv=1),
    "dimensions": f32_file(dims=(1,) * 9),
    "misaligned": f32_file(off=8, data=24),
    "partial-block": f32_file(dims=(33,), t=8, data=34),
    "shape-overflow": f32_file(dims=(1 << 32, 1 << 32, 2)),
    "out-of-bounds": f32_file(data=8),
    "overlap": padded(header(2, 0) + tensor("a", (16,), 0, 0) + tensor("b", (16,), 0, 32)) + b"\1" * 96,
    "name-collision": padded(header(1, 1) + s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 17) + b"".join(s(f"t{i}") for i in range(17)) + tensor("@tokenizer.ggml.tokens", (4,), 0, 0)) + b"\1" * 16,
}

if __name__ == "__main__":
    for name, data in CORPUS.items():
        with open(f"{name}.gguf", "wb") as f:
            f.write(data)
    print(f"wrote {len(CORPUS)} files")
