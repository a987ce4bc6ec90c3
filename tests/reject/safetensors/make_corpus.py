"""Writes one .safetensors file per rule of docs/sources.md that a header
can break; each is named for the rule (tests/reject_corpus.rs checks that
reading it fails with exactly that rule, naming the file and the tensor).
Run from this directory: python3 make_corpus.py"""
import json
import struct


def write(rule, header, data=b"", raw=None):
    body = raw if raw is not None else json.dumps(header, separators=(",", ":")).encode()
    with open(f"{rule}.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(body)) + body + data)


def t(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


with open("too-short.safetensors", "wb") as f:
    f.write(b"\x05\x00\x00")
with open("header-larger-than-file.safetensors", "wb") as f:
    f.write(struct.pack("<Q", 1000) + b"{}")
with open("header-over-cap.safetensors", "wb") as f:
    f.write(struct.pack("<Q", 1 << 62) + b"{}")
write("header-utf8", None, raw=b'{"w\xff":1}')
write("header-json", None, raw=b'{"w":')
write("manifest-not-map", None, raw=b"[1,2]")
write("duplicate-key", None, raw=b'{"w":' + json.dumps(t(offsets=(0, 8))).encode()
      + b',"w":' + json.dumps(t(offsets=(8, 16))).encode() + b"}", data=bytes(16))
write("tensor-info", {"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, data=bytes(8))
write("field-type", {"__metadata__": {"k": 1}, "w": t()}, data=bytes(8))
write("offsets-order", {"w": t(offsets=(8, 0))}, data=bytes(8))
write("range-overflow", {"w": t(dtype="U8", shape=(1,), offsets=((1 << 64) - 2, (1 << 64) - 1))}, data=bytes(1))
write("shape-overflow", {"w": t(shape=(1 << 32, 1 << 32, 2))}, data=bytes(8))
write("out-of-bounds", {"w": t(offsets=(0, 8))}, data=bytes(4))
write("overlap", {"a": t(dtype="U8", shape=(4,), offsets=(0, 4)), "b": t(dtype="U8", shape=(4,), offsets=(2, 6))}, data=bytes(6))
write("length-mismatch", {"w": t(shape=(3,), offsets=(0, 8))}, data=bytes(8))
write("incomplete", {"w": t(offsets=(0, 8))}, data=bytes(12))
