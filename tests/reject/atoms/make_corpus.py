"""Writes the MATRIX-ATOM reject corpus: one file per rule, named after
the rule (docs/matrix-atom.md), each otherwise valid, plus good.atoms
that the SVG-Tensor files are checked against. Independent of the Rust
writer: struct and zlib only. Run from this directory."""
import struct
import zlib

ATOM, VOCAB = 4, 100
IDS = [5, 6, 7, 8, 9, 10, 0, 0]


def header(**f):
    v = dict(magic=b"MTRXATOM", version=1, hb=64, dtype=1, flags=0, res=0, vocab=VOCAB, atom=ATOM,
             count=2, tokens=8, offset=64, crc=None, pcrc=None, tail=b"\0" * 8, payload=None)
    v.update(f)
    payload = v["payload"] if v["payload"] is not None else b"".join(struct.pack("<H", i) for i in IDS)
    pcrc = zlib.crc32(payload) if v["pcrc"] is None else v["pcrc"]
    h = bytearray(struct.pack("<8sHHBBHIIQQQII8s", v["magic"], v["version"], v["hb"], v["dtype"], v["flags"],
                              v["res"], v["vocab"], v["atom"], v["count"], v["tokens"], v["offset"], 0, pcrc,
                              v["tail"]))
    h[0x30:0x34] = struct.pack("<I", zlib.crc32(h) if v["crc"] is None else v["crc"])
    return bytes(h), payload


def atoms(**f):
    h, p = header(**f)
    return h + p


def index(docs, crc=None, magic=b"MTRXIDX1"):
    b = bytearray(magic + struct.pack("<Q", len(docs)))
    for d in docs:
        b += struct.pack("<QQQ", *d)
    return bytes(b + struct.pack("<I", zlib.crc32(b) if crc is None else crc) + b"\0" * 4)


def svgt(magic=b"SVGTENSR", version=1, hb=32, rows=2, cols=2, count=2, offset=32, payload=None):
    p = payload if payload is not None else b"".join(struct.pack("<H", i) for i in IDS)
    return struct.pack("<8sHHHHQQ", magic, version, hb, rows, cols, count, offset) + p


DOCS = [(0, 1, 4), (1, 1, 2)]
files = {
    "atom-truncated.atoms": b"MTRXATOM\x01\x00",
    "atom-magic.atoms": atoms(magic=b"MTRXATOX"),
    "atom-version.atoms": atoms(version=2),
    "atom-header-bytes.atoms": atoms(hb=128),
    "atom-dtype.atoms": atoms(dtype=3),
    "atom-flags.atoms": atoms(flags=4),
    "atom-reserved.atoms": atoms(tail=b"\0\0\0\x01\0\0\0\0"),
    "atom-header-crc.atoms": atoms(crc=0xDEADBEEF),
    "atom-size.atoms": atoms(atom=0, count=0, tokens=0, payload=b""),
    "atom-counts.atoms": atoms(count=3),
    "atom-data-offset.atoms": atoms(offset=72),
    "atom-payload-size.atoms": atoms()[:-2],
    "atom-payload-crc.atoms": atoms(pcrc=0x12345678),
    "atom-token-range.atoms": atoms(payload=b"".join(struct.pack("<H", i) for i in [5, 6, 7, 800, 9, 10, 0, 0])),
    "index-magic.atoms": atoms(flags=2) + index(DOCS, magic=b"MTRXIDX2"),
    "index-size.atoms": atoms(flags=2) + index(DOCS)[:-1],
    "index-crc.atoms": atoms(flags=2) + index(DOCS, crc=1),
    "index-entry.atoms": atoms(flags=2) + index([(0, 1, 4), (2, 1, 2)]),
    "good.atoms": atoms(flags=1),
    "svgt-truncated.svgt": b"SVGTENSR",
    "svgt-magic.svgt": svgt(magic=b"SVGTENSX"),
    "svgt-version.svgt": svgt(version=9),
    "svgt-header-bytes.svgt": svgt(hb=64),
    "svgt-grid.svgt": svgt(rows=0, payload=b""),
    "svgt-data-offset.svgt": svgt(offset=40),
    "svgt-payload-size.svgt": svgt()[:-2],
    "svgt-grid-mismatch.svgt": svgt(rows=1, cols=2, count=4),
    "svgt-atom-count.svgt": svgt(count=1, payload=b"".join(struct.pack("<H", i) for i in IDS[:4])),
    "svgt-payload.svgt": svgt(payload=b"".join(struct.pack("<H", i) for i in [5, 6, 7, 8, 9, 10, 0, 1])),
}
for name, data in files.items():
    with open(name, "wb") as f:
        f.write(data)
