"""MATRIX-ATOM ingest against an independent implementation in Python
(`struct`, `zlib.crc32`, `unicodedata.normalize`): the symbol map of a real
vocabulary (llama.cpp's ggml-vocab-llama-spm.gguf) equal to what the
`gguf` package reads, and ingest packs of real documents (a Debian
licence text, a JSON schema shipped on PyPI) re-derived byte for byte."""
import hashlib
import json
import pathlib
import struct
import unicodedata
import zlib

import gguf
import pytest

from test_gguf import llama_vocab  # noqa: F401 (the session fixture)

# Debian's copy of the Apache licence (base-files), as a .txt input.
DEBIAN_LICENCE = pathlib.Path("/usr/share/common-licenses/Apache-2.0")


@pytest.fixture
def licence(tmp_path):
    out = tmp_path / "Apache-2.0.txt"
    out.write_bytes(DEBIAN_LICENCE.read_bytes())
    return out


def real_json():
    import jsonschema_specifications

    root = pathlib.Path(jsonschema_specifications.__file__).parent
    return root / "schemas" / "draft7" / "metaschema.json"


# ---- the independent implementation (docs/matrix-atom.md) ----

def clean_text(text):
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out, blank = [], False
    for line in (l.rstrip() for l in lines):
        if not line:
            blank = bool(out)
            continue
        if blank:
            out.append("")
            blank = False
        out.append(line)
    return "\n".join(out)


def json_strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from json_strings(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from json_strings(v)


def clean(path):
    text = path.read_bytes().decode("utf-8")
    if path.suffix == ".json":
        blocks = [clean_text(s) for s in json_strings(json.loads(text))]
        return "\n\n".join(b for b in blocks if b)
    return clean_text(text)


def gpt2_char(b):
    printable = lambda x: 0x21 <= x <= 0x7E or 0xA1 <= x <= 0xAC or 0xAE <= x <= 0xFF  # noqa: E731
    if printable(b):
        return chr(b)
    return chr(0x100 + sum(1 for x in range(b) if not printable(x)))


def tokenize(m, text):
    form = {"nfkc": "NFKC", "nfc": "NFC"}.get(m["normalization"])
    s = unicodedata.normalize(form, text) if form else text
    ws = m.get("whitespace", "none")
    if ws == "sentencepiece":
        s = s.replace(" ", "\u2581")
    elif ws == "gpt2":
        s = "".join(gpt2_char(b) for b in s.encode())
    by_text = {}
    for sym in m["symbols"]:
        if sym["text"] and (sym["text"] not in by_text or sym["id"] < by_text[sym["text"]]):
            by_text[sym["text"]] = sym["id"]
    longest = max(map(len, by_text), default=0)
    ids, pos = [], 0
    while pos < len(s):
        for n in range(min(longest, len(s) - pos), 0, -1):
            if s[pos:pos + n] in by_text:
                ids.append(by_text[s[pos:pos + n]])
                pos += n
                break
        else:
            if m["byte_fallback"]:
                ids.extend(m["byte_base_id"] + b for b in s[pos].encode())
            else:
                ids.append(m["unk_id"])
            pos += 1
    return ids


def pack(m, documents, atom_size):
    fmt = "<H" if m["vocab_size"] <= 65536 else "<I"
    payload, docs, atoms = bytearray(), [], 0
    for ids in documents:
        n = -(-len(ids) // atom_size)
        padded = ids + [m["pad_id"]] * (n * atom_size - len(ids))
        payload += b"".join(struct.pack(fmt, i) for i in padded)
        docs.append((atoms, n, len(ids)))
        atoms += n
    dtype_id = 1 if fmt == "<H" else 2
    header = bytearray(struct.pack(
        "<8sHHBBHIIQQQII8s", b"MTRXATOM", 1, 64, dtype_id, 2, 0, m["vocab_size"], atom_size,
        atoms, atoms * atom_size, 64, 0, zlib.crc32(payload), b"\0" * 8))
    header[0x30:0x34] = struct.pack("<I", zlib.crc32(header))
    index = bytearray(b"MTRXIDX1" + struct.pack("<Q", len(docs)))
    for d in docs:
        index += struct.pack("<QQQ", *d)
    index += struct.pack("<I", zlib.crc32(index)) + b"\0" * 4
    return bytes(header + payload + index)


# ---- the tests ----

@pytest.fixture(scope="module")
def symbol_map(zt, llama_vocab, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("map") / "pi_symbol_map.json"
    zt("ingest", "tokenizer", "--from-gguf", llama_vocab, "-o", out)
    return out


def test_the_symbol_map_keeps_ggufs_order(symbol_map, llama_vocab):  # noqa: F811
    m = json.loads(symbol_map.read_text())
    r = gguf.GGUFReader(str(llama_vocab))
    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
    assert [s["text"] for s in m["symbols"]] == tokens
    assert [s["id"] for s in m["symbols"]] == list(range(len(tokens)))
    assert m["vocab_size"] == len(tokens)
    assert m["byte_fallback"] and tokens[m["byte_base_id"]] == "<0x00>"
    assert m["whitespace"] == "sentencepiece"
    bos = r.fields["tokenizer.ggml.bos_token_id"]
    assert m["bos_id"] == int(bos.parts[bos.data[0]][0])


def test_packs_are_rederived_byte_for_byte(zt, symbol_map, tmp_path, licence):
    doc = tmp_path / "mixed.txt"
    doc.write_text("Ünïcödé  ﬁne\r\n\r\n\r\nline two   \n\tTab\n\n", encoding="utf-8")
    inputs = [licence, real_json(), doc]
    for path in inputs:
        assert zt("ingest", "clean", path).stdout.decode() == clean(path) + "\n", path
    out = tmp_path / "pack"
    zt("ingest", "pack", *inputs, "--tokenizer", symbol_map, "--atom-size", "64", "-o", out)
    m = json.loads(symbol_map.read_text())
    documents = [tokenize(m, clean(p)) for p in inputs]
    want = pack(m, documents, 64)
    got = (out / "matrix_atoms.bin").read_bytes()
    assert got == want
    manifest = json.loads((out / "ingest_manifest.json").read_text())
    assert manifest["hash"] == "sha256:" + hashlib.sha256(got).hexdigest()
    assert manifest["tokens"] == sum(map(len, documents))
    assert manifest["artifacts"]["pi_symbol_map.json"] == "sha256:" + hashlib.sha256(symbol_map.read_bytes()).hexdigest()
    zt("ingest", "verify", out)
    # A payload byte changed: verify names the file and the rule, exit 1.
    bad = bytearray(got)
    bad[100] ^= 1
    (out / "matrix_atoms.bin").write_bytes(bytes(bad))
    p = zt("ingest", "verify", out / "matrix_atoms.bin", check=False)
    assert p.returncode == 1 and b"atom-payload-crc" in p.stderr and b"matrix_atoms.bin" in p.stderr, p.stderr
    p = zt("ingest", "verify", out, check=False)
    assert p.returncode == 1 and b"pack-hash" in p.stderr, p.stderr


def test_an_svg_tensor_projection_and_the_narrow_dtype_rule(zt, symbol_map, tmp_path, licence):
    out = tmp_path / "pack"
    zt("ingest", "pack", licence, "--tokenizer", symbol_map, "--atom-size", "64", "--svg", "8x8", "-o", out)
    svgt = (out / "atoms.svgt").read_bytes()
    magic, version, hb, rows, cols, count, off = struct.unpack("<8sHHHHQQ", svgt[:32])
    atoms = (out / "matrix_atoms.bin").read_bytes()
    assert (magic, rows, cols, off) == (b"SVGTENSR", 8, 8, 32)
    assert svgt[32:] == atoms[64:64 + count * 64 * 2]
    zt("ingest", "verify", out / "atoms.svgt", "--atoms", out / "matrix_atoms.bin")
    # One atom drawn: a cell per token, the token's text as its tooltip.
    import xml.etree.ElementTree as ET

    zt("ingest", "svg", out / "atoms.svgt", "--atom", "1", "--tokenizer", symbol_map, "-o", tmp_path / "a.svg")
    ns = {"s": "http://www.w3.org/2000/svg"}
    rects = ET.parse(tmp_path / "a.svg").getroot().findall("s:rect", ns)
    assert len(rects) == 64
    first = struct.unpack("<H", svgt[32 + 128:32 + 130])[0]
    texts = {sym["id"]: sym["text"] for sym in json.loads(symbol_map.read_text())["symbols"]}
    assert rects[0].find("s:title", ns).text == f"{first}: {texts[first]}"
    p = zt("ingest", "pack", licence, "--tokenizer", symbol_map, "--atom-size", "64", "--svg", "4x4", "-o", tmp_path / "x", check=False)
    assert p.returncode == 1 and b"svgt-grid-mismatch" in p.stderr, p.stderr
    assert not (tmp_path / "x").exists()
    big = json.loads(symbol_map.read_text())
    big["vocab_size"] = 70000
    wide = tmp_path / "wide.json"
    wide.write_text(json.dumps(big))
    p = zt("ingest", "pack", licence, "--tokenizer", wide, "--atom-size", "64", "--dtype", "u16", "-o", tmp_path / "y", check=False)
    assert p.returncode == 1 and b"atom-dtype-narrow" in p.stderr, p.stderr


@pytest.mark.parametrize("transport", ["quic", "http"])
def test_a_served_pack_loads_with_the_python_package(zt, symbol_map, tmp_path, licence, llama_vocab, transport):  # noqa: F811
    """An ingest pack served by the daemon, read with the Python package:
    the atoms (a row range of them, and all) equal the independent
    re-derivation's, the grids are the atoms, and the symbols (row = id)
    are the GGUF vocabulary's tokens as the `gguf` package reads them."""
    import numpy as np

    import ztserve
    from conftest import daemon

    root = tmp_path / "root"
    root.mkdir()
    inputs = [licence, real_json()]
    zt("ingest", "pack", *inputs, "--tokenizer", symbol_map, "--atom-size", "64", "--svg", "8x8", "-o", root / "corpus")
    m = json.loads(symbol_map.read_text())
    want = pack(m, [tokenize(m, clean(p)) for p in inputs], 64)
    count = struct.unpack("<Q", want[0x18:0x20])[0]
    atoms = np.frombuffer(want[64:64 + count * 128], dtype="<u2").reshape(count, 64)
    r = gguf.GGUFReader(str(llama_vocab))
    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
    with daemon(root, tmp_path) as port:
        # The pack's JSON manifest validates against the served schema.
        import urllib.request

        import jsonschema

        base = f"http://127.0.0.1:{port}/v1"
        with urllib.request.urlopen(f"{base}/schema/manifest.json") as r:
            schema = json.load(r)
        with urllib.request.urlopen(f"{base}/files/corpus/ingest_manifest.json/manifest") as r:
            doc = json.load(r)
        jsonschema.Draft202012Validator(schema).validate(doc)
        assert doc["source"] == "matrix-atom-pack"
        scheme = "quic" if transport == "quic" else "http"
        url = f"{scheme}://127.0.0.1:{port}/corpus/ingest_manifest.json"
        with ztserve.safe_open(url, insecure=True) as h:
            assert h.source == "matrix-atom-pack"
            assert np.array_equal(h.get_slice("atoms")[2:5], atoms[2:5])
            assert np.array_equal(h.get_tensor("atoms"), atoms)
            assert np.array_equal(h.get_tensor("grids"), atoms.reshape(count, 8, 8))
            sym = h.get_object("symbols")
            offsets, values = sym["offsets"], bytes(sym["values"])
            texts = [values[offsets[i]:offsets[i + 1]].decode() for i in range(len(offsets) - 1)]
            assert texts == tokens
            assert bytes(h.get_tensor("symbol_map")) == symbol_map.read_bytes()


NGINX_PAGE = pathlib.Path("/usr/share/nginx/html/index.html")


@pytest.fixture
def llama_readme(llama_vocab, tmp_path):  # noqa: F811
    """llama-cpp-python's README.md, from the pinned sdist the vocabulary came from."""
    import tarfile

    from test_gguf import SDIST

    with tarfile.open(pathlib.Path(llama_vocab).parent / SDIST) as t:
        member = next(m for m in t.getmembers() if m.name.endswith("0.3.36/README.md"))
        out = tmp_path / "README.md"
        out.write_bytes(t.extractfile(member).read())
    return out


def test_html_and_markdown_of_real_documents(zt, symbol_map, tmp_path, llama_readme):
    # Debian's nginx welcome page (nginx-common), cleaned exactly so.
    assert zt("ingest", "clean", NGINX_PAGE).stdout.decode() == (
        "Welcome to nginx!\n\n"
        "If you see this page, the nginx web server is successfully installed and working. "
        "Further configuration is required.\n\n"
        "For online documentation and support please refer to nginx.org.\n"
        "Commercial support is available at nginx.com.\n\n"
        "Thank you for using nginx.\n"
    )
    # llama-cpp-python's README: link text yes, URLs and alt text no.
    text = zt("ingest", "clean", llama_readme).stdout.decode()
    assert text.startswith("Python Bindings for llama.cpp\n\nSimple Python bindings for @ggerganov's llama.cpp library.")
    assert "LangChain compatibility" in text
    for absent in ["https://python.langchain.com", "Documentation Status", "raw.githubusercontent", "<p", "**", "]("]:
        assert absent not in text, absent
    # Packed from those texts, the atoms are what Python derives from them.
    out = tmp_path / "pack"
    zt("ingest", "pack", NGINX_PAGE, llama_readme, "--tokenizer", symbol_map, "--atom-size", "32", "-o", out)
    m = json.loads(symbol_map.read_text())
    cleaned = [zt("ingest", "clean", p).stdout.decode()[:-1] for p in (NGINX_PAGE, llama_readme)]
    assert (out / "matrix_atoms.bin").read_bytes() == pack(m, [tokenize(m, c) for c in cleaned], 32)
    zt("ingest", "verify", out)
